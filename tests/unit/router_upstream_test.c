/* Unit tests of the router-svc upstream module against a scripted HTTP/1.1 server of its own on
 * 127.0.0.1 (an ephemeral port, a thread of this test). Every scenario runs twice: through an
 * upstream created with native = 1 (the built-in HTTP/1.1 client) and through one with
 * native = 0 (libcurl), and both must give the same outcome: error code, status, body,
 * retry-after, streamed bytes. The whole group runs twice too: over plain http, then over TLS
 * (https URLs, the server speaking TLS with a self-signed certificate made here, which the
 * requests name as their CA bundle). The module runs its own loop thread (embedded = 0): callbacks
 * arrive there and the test waits for them under a mutex, always with a deadline.
 *
 * Every check prints "ok N - ..." or "not ok N - ..."; a scenario with a failed check fails its
 * cmocka test, and the program exits non-zero. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>

#include "tg_err.h"
#include "http_fields.h"
#include "tg_time.h"
#include "resolver.h"
#include "upstream.h"

#define PATH "/v1/chat/completions"
#define REQ_BODY "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
/* the scripted server */
#define SRV_CONNS_MAX 8                   /* open connections at once */
#define SRV_REQS_MAX 16                   /* requests recorded per server */
#define SRV_RESP_MAX 4                    /* scripted responses per server */
#define SRV_BUF_MAX_BYTES (1024u * 1024u) /* one connection's unread request bytes */
#define SRV_HEAD_MAX_BYTES 4096u          /* request header section */
#define SRV_POLL_MS 50                    /* longest wait before the stop flag is seen */
#define SRV_SEND_TIMEOUT_S 5              /* a blocked write gives up after this */
/* the transfers */
#define XFER_POOL_MAX 128                 /* transfers per run of the group */
#define XFER_DATA_MAX_BYTES (64u * 1024u) /* streamed bytes kept per transfer */
#define WAIT_MS 15000u                    /* longest wait for an on_done */
#define UNPAUSE_DELAY_MS 5                /* pause -> rt_upstream_unpause */
#define STREAM_RECV_BYTES 1024            /* recv_buffer_bytes of the stream scenarios */

/* ------------------------------------------------------------------------------ checks */

static unsigned n_checks;
static unsigned n_failed;

/* Print "ok N - what" or "not ok N - what"; count failures. */
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    n_checks++;
    if (!ok)
        n_failed++;
    printf("%s %u - %s\n", ok ? "ok" : "not ok", n_checks, msg);
    fflush(stdout);
}

/* ------------------------------------------------------------------------ scripted server */

enum srv_then {
    SRV_KEEP = 0, /* read the next request on the connection */
    SRV_CLOSE,    /* close right after the response (no "Connection: close" unless scripted) */
    SRV_STALL     /* never write again; read and drop until the client closes */
};

struct srv_script {
    /* raw responses: the k-th request the server receives (0-based, any connection) gets
     * resp[k], or the last one when k is past the end; resp[0] == NULL: never answer */
    const char *resp[SRV_RESP_MAX];
    size_t piece;       /* bytes per write, 0 = the rest in one write */
    size_t split;       /* > 0: the first write ends at this offset */
    unsigned gap_us;    /* sleep between two writes */
    enum srv_then then; /* after a response */
    int drop_nth;       /* > 0: the drop_nth request of a connection (and any later one) is
                           read, then the connection is closed without an answer */
    int early;          /* answer resp[0] as soon as a request's header section is in, shut the
                           write side and read nothing more: the body stays unsent */
    unsigned delay_us;  /* sleep before each response */
};

struct srv_req {
    char line[256];                /* request line, without CRLF */
    char head[SRV_HEAD_MAX_BYTES]; /* header lines (CRLF-separated), NUL-terminated */
    char *body;                    /* malloc'd, body_len bytes */
    size_t body_len;
    int conn; /* 1-based number of the connection it arrived on */
    int nth;  /* 1-based number of the request on that connection */
};

struct srv_conn {
    int fd;      /* -1: free */
    SSL *ssl;    /* the TLS group: the session over fd */
    int num;     /* 1-based accept order */
    int nreq;    /* requests read on it */
    int stalled; /* answered all it will: bytes are read and dropped until the close */
    int mute;    /* answered early: nothing is read any more, the client's close ends it */
    char *buf;   /* SRV_BUF_MAX_BYTES */
    size_t len;
};

struct srv {
    int lfd;
    int wake[2]; /* pipe: stop */
    uint16_t port;
    pthread_t thread;
    _Atomic int stop;
    struct srv_script sc;                 /* fixed before the thread starts */
    struct srv_conn conns[SRV_CONNS_MAX]; /* server thread */
    pthread_mutex_t mu;                   /* guards the fields below */
    struct srv_req reqs[SRV_REQS_MAX];
    int n_reqs;
    int n_lost;     /* requests not recorded (table full, bad framing, no free connection) */
    int n_accepted; /* connections accepted */
    int n_answered; /* responses written in full */
};

/* Count of header lines called name in r; the first one's value (trimmed) into val. */
static int req_header(const struct srv_req *r, const char *name, char *val, size_t cap)
{
    return http_field_lookup(r->head, name, val, cap);
}

/* The TLS group: the servers' context and certificate, which is also the requests' CA bundle. */
static int tls_mode;
static SSL_CTX *srv_tls;
static char srv_ca_path[64];

static void srv_conn_close(struct srv_conn *c)
{
    if (c->ssl != NULL) {
        SSL_shutdown(c->ssl); /* close_notify, as a TLS server says goodbye */
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = 0;
}

/* Write b[0..n) in the scripted pieces. 0, or -1 when the client went away. */
static int srv_write(const struct srv *sv, const struct srv_conn *c, const char *b, size_t n)
{
    size_t off = 0;

    while (off < n) {
        size_t w = n - off;
        size_t done = 0;

        if (off == 0 && sv->sc.split > 0 && sv->sc.split < n)
            w = sv->sc.split;
        else if (sv->sc.piece > 0 && sv->sc.piece < w)
            w = sv->sc.piece;
        if (off > 0 && sv->sc.gap_us > 0)
            usleep(sv->sc.gap_us);
        while (done < w) {
            ssize_t r = c->ssl != NULL ? SSL_write(c->ssl, b + off + done, (int)(w - done))
                                       : send(c->fd, b + off + done, w - done, MSG_NOSIGNAL);

            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return -1;
            done += (size_t)r;
        }
        off += w;
    }
    return 0;
}

/* One whole request at the head of c->buf: record it, answer it. Returns 1 when the next
 * request may follow on the connection, 0 when more bytes are needed or the connection is
 * closed or stalled. */
static int srv_take_request(struct srv *sv, struct srv_conn *c)
{
    const char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    const char *eol;
    struct srv_req tmp;
    char cl[32];
    size_t head_len, body_len, total;
    const char *resp;
    int k;

    if (end == NULL) {
        if (c->len >= SRV_HEAD_MAX_BYTES) {
            pthread_mutex_lock(&sv->mu);
            sv->n_lost++;
            pthread_mutex_unlock(&sv->mu);
            srv_conn_close(c);
        }
        return 0;
    }
    head_len = (size_t)(end - c->buf) + 4;
    if (sv->sc.early) {
        resp = sv->sc.resp[0];
        if (resp == NULL || srv_write(sv, c, resp, strlen(resp)) != 0) {
            srv_conn_close(c);
            return 0;
        }
        if (c->ssl != NULL)
            SSL_shutdown(c->ssl);
        shutdown(c->fd, SHUT_WR);
        c->mute = 1;
        pthread_mutex_lock(&sv->mu);
        sv->n_answered++;
        pthread_mutex_unlock(&sv->mu);
        return 0;
    }
    eol = memmem(c->buf, head_len, "\r\n", 2);
    memset(&tmp, 0, sizeof(tmp));
    snprintf(tmp.line, sizeof(tmp.line), "%.*s", (int)(eol - c->buf), c->buf);
    if (head_len - (size_t)(eol - c->buf) - 2 >= sizeof(tmp.head)) {
        pthread_mutex_lock(&sv->mu);
        sv->n_lost++;
        pthread_mutex_unlock(&sv->mu);
        srv_conn_close(c);
        return 0;
    }
    /* the header lines, each with its CRLF (the blank line's CRLF is left out) */
    memcpy(tmp.head, eol + 2, head_len - (size_t)(eol - c->buf) - 4);
    body_len = 0;
    if (req_header(&tmp, "Content-Length", cl, sizeof(cl)) > 0)
        body_len = (size_t)strtoull(cl, NULL, 10);
    total = head_len + body_len;
    if (total > SRV_BUF_MAX_BYTES) {
        pthread_mutex_lock(&sv->mu);
        sv->n_lost++;
        pthread_mutex_unlock(&sv->mu);
        srv_conn_close(c);
        return 0;
    }
    if (c->len < total)
        return 0;
    c->nreq++;
    tmp.conn = c->num;
    tmp.nth = c->nreq;
    tmp.body_len = body_len;
    tmp.body = malloc(body_len + 1);
    if (tmp.body != NULL) {
        memcpy(tmp.body, c->buf + head_len, body_len);
        tmp.body[body_len] = '\0';
    }
    memmove(c->buf, c->buf + total, c->len - total);
    c->len -= total;
    pthread_mutex_lock(&sv->mu);
    k = sv->n_reqs + sv->n_lost;
    if (sv->n_reqs < SRV_REQS_MAX && tmp.body != NULL) {
        sv->reqs[sv->n_reqs++] = tmp;
    } else {
        free(tmp.body);
        sv->n_lost++;
    }
    pthread_mutex_unlock(&sv->mu);

    if (sv->sc.drop_nth > 0 && c->nreq >= sv->sc.drop_nth) {
        srv_conn_close(c);
        return 0;
    }
    if (sv->sc.resp[0] == NULL) {
        c->stalled = 1;
        return 0;
    }
    if (k >= SRV_RESP_MAX)
        k = SRV_RESP_MAX - 1;
    while (k > 0 && sv->sc.resp[k] == NULL)
        k--;
    resp = sv->sc.resp[k];
    if (sv->sc.delay_us > 0)
        usleep(sv->sc.delay_us);
    if (srv_write(sv, c, resp, strlen(resp)) != 0) {
        srv_conn_close(c);
        return 0;
    }
    pthread_mutex_lock(&sv->mu);
    sv->n_answered++;
    pthread_mutex_unlock(&sv->mu);
    if (sv->sc.then == SRV_CLOSE) {
        srv_conn_close(c);
        return 0;
    }
    if (sv->sc.then == SRV_STALL) {
        c->stalled = 1;
        return 0;
    }
    return 1;
}

static void srv_readable(struct srv *sv, struct srv_conn *c)
{
    ssize_t n;

    if (c->mute) {
        srv_conn_close(c); /* polled for nothing but hang-up and error */
        return;
    }
    if (c->stalled) {
        char drop[4096];

        n = c->ssl != NULL ? SSL_read(c->ssl, drop, sizeof(drop)) : recv(c->fd, drop, sizeof(drop), 0);
        if (n <= 0)
            srv_conn_close(c);
        return;
    }
    n = c->ssl != NULL ? SSL_read(c->ssl, c->buf + c->len, (int)(SRV_BUF_MAX_BYTES - c->len))
                       : recv(c->fd, c->buf + c->len, SRV_BUF_MAX_BYTES - c->len, 0);
    if (n <= 0) {
        srv_conn_close(c);
        return;
    }
    c->len += (size_t)n;
    while (c->fd >= 0 && srv_take_request(sv, c) == 1)
        ;
}

static void srv_accept(struct srv *sv)
{
    struct timeval tv = {.tv_sec = SRV_SEND_TIMEOUT_S, .tv_usec = 0};
    int one = 1;
    int fd = accept4(sv->lfd, NULL, NULL, SOCK_CLOEXEC);
    struct srv_conn *c = NULL;

    if (fd < 0)
        return;
    for (int i = 0; i < SRV_CONNS_MAX; i++) {
        if (sv->conns[i].fd < 0) {
            c = &sv->conns[i];
            break;
        }
    }
    pthread_mutex_lock(&sv->mu);
    sv->n_accepted++;
    if (c == NULL)
        sv->n_lost++;
    pthread_mutex_unlock(&sv->mu);
    if (c == NULL) {
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (srv_tls != NULL) {
        /* the handshake here, bounded: a client that never makes it is dropped */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        c->ssl = SSL_new(srv_tls);
        if (c->ssl == NULL || SSL_set_fd(c->ssl, fd) != 1 || SSL_accept(c->ssl) != 1) {
            SSL_free(c->ssl);
            c->ssl = NULL;
            ERR_clear_error();
            close(fd);
            return;
        }
    }
    c->fd = fd;
    c->num = sv->n_accepted; /* written by this thread only */
    c->nreq = 0;
    c->stalled = 0;
    c->len = 0;
}

static void *srv_main(void *arg)
{
    struct srv *sv = arg;

    while (!atomic_load(&sv->stop)) {
        struct pollfd pfd[2 + SRV_CONNS_MAX];
        int who[2 + SRV_CONNS_MAX];
        nfds_t n = 0;
        int r;

        pfd[n].fd = sv->wake[0];
        pfd[n].events = POLLIN;
        who[n++] = -1;
        pfd[n].fd = sv->lfd;
        pfd[n].events = POLLIN;
        who[n++] = -2;
        for (int i = 0; i < SRV_CONNS_MAX; i++) {
            if (sv->conns[i].fd < 0)
                continue;
            pfd[n].fd = sv->conns[i].fd;
            pfd[n].events = sv->conns[i].mute ? 0 : POLLIN;
            who[n++] = i;
        }
        r = poll(pfd, n, SRV_POLL_MS);
        if (r <= 0)
            continue;
        for (nfds_t i = 0; i < n; i++) {
            if (pfd[i].revents == 0)
                continue;
            if (who[i] == -2)
                srv_accept(sv);
            else if (who[i] >= 0 && sv->conns[who[i]].fd == pfd[i].fd)
                srv_readable(sv, &sv->conns[who[i]]);
        }
    }
    for (int i = 0; i < SRV_CONNS_MAX; i++)
        srv_conn_close(&sv->conns[i]);
    return NULL;
}

/* srv_start listens on [::1] instead of 127.0.0.1 while this is set. */
static int srv_v6;

/* Start a server on 127.0.0.1 ([::1] with srv_v6; ephemeral port) running sc. Returns new
 * (srv_stop) or NULL. */
static struct srv *srv_start(const struct srv_script *sc)
{
    struct srv *sv = calloc(1, sizeof(*sv));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int one = 1;

    if (sv == NULL)
        return NULL;
    sv->sc = *sc;
    sv->lfd = -1;
    sv->wake[0] = sv->wake[1] = -1;
    pthread_mutex_init(&sv->mu, NULL);
    for (int i = 0; i < SRV_CONNS_MAX; i++) {
        sv->conns[i].fd = -1;
        sv->conns[i].buf = malloc(SRV_BUF_MAX_BYTES);
        if (sv->conns[i].buf == NULL)
            goto fail;
    }
    if (pipe2(sv->wake, O_CLOEXEC) != 0)
        goto fail;
    memset(&ss, 0, sizeof(ss));
    if (srv_v6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;

        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_loopback;
        sl = sizeof(*a6);
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;

        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof(*a4);
    }
    sv->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sv->lfd < 0)
        goto fail;
    setsockopt(sv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(sv->lfd, (struct sockaddr *)&ss, sl) != 0 || listen(sv->lfd, 16) != 0 ||
        getsockname(sv->lfd, (struct sockaddr *)&ss, &sl) != 0)
        goto fail;
    sv->port = ntohs(srv_v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                            : ((struct sockaddr_in *)&ss)->sin_port);
    if (pthread_create(&sv->thread, NULL, srv_main, sv) != 0)
        goto fail;
    return sv;
fail:
    if (sv->lfd >= 0)
        close(sv->lfd);
    if (sv->wake[0] >= 0) {
        close(sv->wake[0]);
        close(sv->wake[1]);
    }
    for (int i = 0; i < SRV_CONNS_MAX; i++)
        free(sv->conns[i].buf);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    return NULL;
}

/* Stop and free (accepts NULL). */
static void srv_stop(struct srv *sv)
{
    ssize_t w;

    if (sv == NULL)
        return;
    atomic_store(&sv->stop, 1);
    w = write(sv->wake[1], "x", 1);
    (void)w;
    pthread_join(sv->thread, NULL);
    close(sv->lfd);
    close(sv->wake[0]);
    close(sv->wake[1]);
    for (int i = 0; i < SRV_CONNS_MAX; i++)
        free(sv->conns[i].buf);
    for (int i = 0; i < sv->n_reqs; i++)
        free(sv->reqs[i].body);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
}

/* Snapshot of the counters (the records themselves are stable once counted). */
static void srv_counts(struct srv *sv, int *reqs, int *accepted, int *lost)
{
    pthread_mutex_lock(&sv->mu);
    if (reqs != NULL)
        *reqs = sv->n_reqs;
    if (accepted != NULL)
        *accepted = sv->n_accepted;
    if (lost != NULL)
        *lost = sv->n_lost;
    pthread_mutex_unlock(&sv->mu);
}

/* A loopback port nobody listens on: bound, read, closed. 0 on failure. */
static uint16_t closed_port(void)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uint16_t port = 0;

    if (fd < 0)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* ----------------------------------------------------------------------------- clients */

struct client {
    const char *name; /* "native" or "curl" */
    struct rt_upstream *up;
    /* outcomes reported to on_done, by error; guarded by mu */
    uint64_t n_done, n_cancelled, n_timeouts, n_too_big;
};

struct xfer {
    struct client *cl;
    uint64_t handle;
    int submitted;
    /* on_done; guarded by mu */
    int dones; /* on_done calls (must end at 1) */
    int err;
    long status;
    char *body; /* taken from the result, freed at teardown */
    size_t body_len;
    int body_nul; /* body was NUL-terminated */
    long retry_after_s;
    uint64_t ttfb_us;
    char detail[128];
    uint64_t submit_us, done_us; /* monotonic */
    /* on_data; guarded by mu */
    char *data; /* XFER_DATA_MAX_BYTES, accepted bytes in order */
    size_t data_len;
    int data_overflow;
    unsigned data_calls;
    size_t max_piece;
    int data_after_done;
    int data_while_paused; /* on_data ran between a pause and its unpause */
    int pause_every;       /* pause on every pause_every-th call (0: never) */
    int pause_each_offset; /* pause the first time bytes at each offset are offered */
    size_t paused_at;      /* data_len + 1 at the last pause_each_offset pause */
    int pause_pending;     /* paused, not yet unpaused by the main thread */
    int hold;              /* xfer_wait does not unpause */
    unsigned pauses;
};

static struct client clients[2];
static struct xfer pool[XFER_POOL_MAX];
static int pool_used;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast on every callback */

static size_t on_data(void *ud, const char *p, size_t n)
{
    struct xfer *x = ud;
    size_t r = n;

    pthread_mutex_lock(&mu);
    x->data_calls++;
    if (x->dones > 0)
        x->data_after_done = 1;
    if (x->pause_pending)
        x->data_while_paused = 1;
    if (n > x->max_piece)
        x->max_piece = n;
    if ((x->pause_every > 0 && x->data_calls % (unsigned)x->pause_every == 0) ||
        (x->pause_each_offset && x->paused_at != x->data_len + 1)) {
        x->paused_at = x->data_len + 1;
        x->pause_pending = 1;
        x->pauses++;
        r = RT_UPSTREAM_PAUSE;
    } else if (x->data_len + n > XFER_DATA_MAX_BYTES) {
        x->data_overflow = 1;
    } else {
        memcpy(x->data + x->data_len, p, n);
        x->data_len += n;
    }
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return r;
}

static void on_done(void *ud, struct rt_upstream_result *res)
{
    struct xfer *x = ud;

    pthread_mutex_lock(&mu);
    x->dones++;
    if (x->dones == 1) {
        x->err = res->err;
        x->status = res->status;
        x->retry_after_s = res->retry_after_s;
        x->ttfb_us = res->ttfb_us;
        snprintf(x->detail, sizeof(x->detail), "%s", res->detail);
        x->body = res->body;
        x->body_len = res->body_len;
        x->body_nul = res->body == NULL || res->body[res->body_len] == '\0';
        res->body = NULL;
        x->done_us = tg_now_mono_us();
        x->cl->n_done++;
        if (res->err == TG_ECLOSED)
            x->cl->n_cancelled++;
        else if (res->err == TG_ETIMEOUT)
            x->cl->n_timeouts++;
        else if (res->err == TG_ETOOBIG)
            x->cl->n_too_big++;
    }
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static const struct rt_upstream_ops ops = {.on_data = on_data, .on_done = on_done};

/* Wait on cv for at most ms. Caller holds mu. */
static void cv_wait_ms(unsigned ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&cv, &mu, &ts);
}

/* A fresh transfer context from the pool (never reused: a late callback stays harmless). */
static struct xfer *xfer_new(struct client *cl)
{
    struct xfer *x;

    assert_true(pool_used < XFER_POOL_MAX);
    x = &pool[pool_used++];
    memset(x, 0, sizeof(*x));
    x->cl = cl;
    x->data = malloc(XFER_DATA_MAX_BYTES);
    assert_non_null(x->data);
    return x;
}

/* A request for url with the defaults of the scenarios (non-stream, 5 s, 1 MiB cap). */
static void req_init(struct rt_upstream_request *req, const char *url)
{
    memset(req, 0, sizeof(*req));
    req->url = url;
    req->body = strdup(REQ_BODY);
    req->body_len = strlen(REQ_BODY);
    req->timeout_ms = 5000;
    req->idle_timeout_ms = 5000;
    req->max_response_bytes = 1024 * 1024;
}

static void url_of(char *url, size_t cap, const char *host, uint16_t port)
{
    snprintf(url, cap, "%s://%s:%u%s", tls_mode ? "https" : "http", host, (unsigned)port, PATH);
}

/* Submit req (its body is taken) for x. 0 or the submit error (checked). */
static int xfer_submit(struct xfer *x, struct rt_upstream_request *req)
{
    int rc;

    x->submit_us = tg_now_mono_us();
    if (tls_mode && req->ca_file == NULL)
        req->ca_file = srv_ca_path;
    rc = rt_upstream_submit(x->cl->up, req, &ops, x, &x->handle);
    check(rc == 0 && req->body == NULL, "%s: submit %s returns 0 and takes the body (rc %d)",
          x->cl->name, req->url, rc);
    x->submitted = rc == 0;
    return rc;
}

/* Wait until x is done, unpausing it (from this thread, after UNPAUSE_DELAY_MS) each time on_data
 * paused it. Returns 1 when on_done came within ms; otherwise the transfer is cancelled (and
 * waited for a little more) and 0 returned. */
static int xfer_wait(struct xfer *x, unsigned ms)
{
    uint64_t end = tg_now_mono_us() + (uint64_t)ms * 1000u;
    int done;

    if (!x->submitted)
        return 0;
    pthread_mutex_lock(&mu);
    while (x->dones == 0 && tg_now_mono_us() < end) {
        if (x->pause_pending && !x->hold) {
            pthread_mutex_unlock(&mu);
            tg_sleep_ms(UNPAUSE_DELAY_MS);
            pthread_mutex_lock(&mu);
            x->pause_pending = 0;
            pthread_mutex_unlock(&mu);
            rt_upstream_unpause(x->cl->up, x->handle);
            pthread_mutex_lock(&mu);
            continue;
        }
        cv_wait_ms(20);
    }
    done = x->dones > 0;
    pthread_mutex_unlock(&mu);
    check(done, "%s: on_done within %u ms", x->cl->name, ms);
    if (!done) {
        rt_upstream_cancel(x->cl->up, x->handle);
        end = tg_now_mono_us() + 5000000u;
        pthread_mutex_lock(&mu);
        while (x->dones == 0 && tg_now_mono_us() < end)
            cv_wait_ms(20);
        pthread_mutex_unlock(&mu);
    }
    return done;
}

/* Wait until on_data ran at least n times (or ms passed). 1 when it did. */
static int xfer_wait_data(struct xfer *x, unsigned n, unsigned ms)
{
    uint64_t end = tg_now_mono_us() + (uint64_t)ms * 1000u;
    int ok;

    pthread_mutex_lock(&mu);
    while (x->data_calls < n && x->dones == 0 && tg_now_mono_us() < end)
        cv_wait_ms(20);
    ok = x->data_calls >= n;
    pthread_mutex_unlock(&mu);
    return ok;
}

static unsigned elapsed_ms(const struct xfer *x)
{
    return x->done_us > x->submit_us ? (unsigned)((x->done_us - x->submit_us) / 1000u) : 0;
}

/* The outcome of x: err, status, and (when body != NULL) the exact body. */
static void expect(const char *scn, const struct xfer *x, int err, long status, const char *body)
{
    const char *name = x->cl->name;

    check(x->dones == 1, "%s %s: exactly one on_done (%d)", name, scn, x->dones);
    check(x->err == err, "%s %s: err %s (got %s, detail \"%s\")", name, scn, tg_strerror(err),
          tg_strerror(x->err), x->detail);
    check(x->status == status, "%s %s: status %ld (got %ld)", name, scn, status, x->status);
    check(x->body_nul, "%s %s: body NUL-terminated", name, scn);
    if (body != NULL)
        check(x->body_len == strlen(body) &&
                  (x->body_len == 0 || memcmp(x->body, body, x->body_len) == 0),
              "%s %s: body of %zu bytes \"%.40s\" (got %zu bytes \"%.40s\")", name, scn,
              strlen(body), body, x->body_len, x->body != NULL ? x->body : "");
}

/* The same observable outcome through both clients. cmp_body: compare the bodies too. */
static void same(const char *scn, const struct xfer *a, const struct xfer *b, int cmp_body)
{
    check(a->err == b->err, "%s: same err (native %s, curl %s)", scn, tg_strerror(a->err),
          tg_strerror(b->err));
    check(a->status == b->status, "%s: same status (native %ld, curl %ld)", scn, a->status,
          b->status);
    check(a->retry_after_s == b->retry_after_s, "%s: same retry_after_s (native %ld, curl %ld)",
          scn, a->retry_after_s, b->retry_after_s);
    if (cmp_body)
        check(a->body_len == b->body_len &&
                  (a->body_len == 0 || memcmp(a->body, b->body, a->body_len) == 0),
              "%s: same body (native %zu bytes, curl %zu bytes)", scn, a->body_len, b->body_len);
    check(a->data_len == b->data_len &&
              (a->data_len == 0 || memcmp(a->data, b->data, a->data_len) == 0),
          "%s: same on_data bytes (native %zu, curl %zu)", scn, a->data_len, b->data_len);
}

/* The recorded request i of sv, NULL when there is none. Borrowed until srv_stop (a record
 * never changes once it is counted). */
static const struct srv_req *srv_req_at(struct srv *sv, int i)
{
    const struct srv_req *r = NULL;

    pthread_mutex_lock(&sv->mu);
    if (i < sv->n_reqs)
        r = &sv->reqs[i];
    pthread_mutex_unlock(&sv->mu);
    return r;
}

/* One request through cl to a fresh server running sc, waited for. The server is returned for
 * inspection (srv_stop it), the transfer in *out. */
static struct srv *run_one(struct client *cl, const struct srv_script *sc,
                           struct rt_upstream_request *tmpl, struct xfer **out)
{
    struct srv *sv = srv_start(sc);
    struct rt_upstream_request req;
    char url[128];
    struct xfer *x = xfer_new(cl);

    assert_non_null(sv);
    url_of(url, sizeof(url), "127.0.0.1", sv->port);
    req_init(&req, url);
    if (tmpl != NULL) {
        free(req.body);
        req = *tmpl;
        req.url = url;
        tmpl->body = NULL;
    }
    xfer_submit(x, &req);
    xfer_wait(x, WAIT_MS);
    *out = x;
    return sv;
}

static int begin(const char *scn)
{
    printf("# %s\n", scn);
    fflush(stdout);
    return (int)n_failed;
}

/* --------------------------------------------------------------------------- scenarios */

static const char ok_body[] = "{\"id\":\"c1\",\"choices\":[{\"message\":{\"content\":\"hello\"}}]}";

/* A response with a Content-Length; extra headers (CRLF-terminated lines) may be given. */
static char *resp_cl(long status, const char *reason, const char *extra, const char *body)
{
    size_t cap = strlen(body) + (extra != NULL ? strlen(extra) : 0) + 256;
    char *b = malloc(cap);

    assert_non_null(b);
    snprintf(b, cap,
             "HTTP/1.1 %ld %s\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n"
             "%s",
             status, reason, extra != NULL ? extra : "", strlen(body), body);
    return b;
}

/* 1. Content-Length responses: a 200 with the exact body and no retry-after, a 429 with
 * Retry-After: 7, and a 200 again through a localhost URL. */
static void test_content_length(void **state)
{
    int f0 = begin("1 content-length, retry-after, localhost");
    char *r200 = resp_cl(200, "OK", NULL, ok_body);
    char *r429 = resp_cl(429, "Too Many Requests", "Retry-After: 7\r\n",
                         "{\"error\":{\"message\":\"slow down\"}}");
    struct srv_script sc = {.resp = {r200, r429, r200}, .then = SRV_KEEP};
    struct xfer *x[2][3];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = srv_start(&sc);
        struct rt_upstream_request req;
        char url[128];

        assert_non_null(sv);
        for (int i = 0; i < 3; i++) {
            x[ci][i] = xfer_new(&clients[ci]);
            url_of(url, sizeof(url), i == 2 ? "localhost" : "127.0.0.1", sv->port);
            req_init(&req, url);
            xfer_submit(x[ci][i], &req);
            xfer_wait(x[ci][i], WAIT_MS);
        }
        expect("200", x[ci][0], 0, 200, ok_body);
        check(x[ci][0]->retry_after_s == -1, "%s 200: retry_after_s -1 (got %ld)", clients[ci].name,
              x[ci][0]->retry_after_s);
        check(x[ci][0]->ttfb_us > 0, "%s 200: ttfb_us > 0", clients[ci].name);
        expect("429", x[ci][1], 0, 429, "{\"error\":{\"message\":\"slow down\"}}");
        check(x[ci][1]->retry_after_s == 7, "%s 429: retry_after_s 7 (got %ld)", clients[ci].name,
              x[ci][1]->retry_after_s);
        expect("200 via localhost", x[ci][2], 0, 200, ok_body);
        srv_stop(sv);
    }
    same("1 200", x[0][0], x[1][0], 1);
    same("1 429", x[0][1], x[1][1], 1);
    same("1 localhost", x[0][2], x[1][2], 1);
    free(r200);
    free(r429);
    assert_int_equal(n_failed, f0);
}

/* 2. A chunked response (with a chunk extension and a trailer) written one byte at a time, twice
 * on the same connection. */
static void test_chunked_bytewise(void **state)
{
    int f0 = begin("2 chunked, one byte per write");
    static const char resp[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: application/json\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n"
                               "7;ext=1\r\n{\"a\":\"b\r\n"
                               "1A\r\nabcdefghijklmnopqrstuvwxyz\r\n"
                               "2\r\n\"}\r\n"
                               "0\r\nX-Trailer: t\r\n\r\n";
    static const char body[] = "{\"a\":\"babcdefghijklmnopqrstuvwxyz\"}";
    struct srv_script sc = {.resp = {resp}, .piece = 1, .gap_us = 200, .then = SRV_KEEP};
    struct xfer *x[2][2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = srv_start(&sc);
        struct rt_upstream_request req;
        char url[128];
        int accepted = 0;

        assert_non_null(sv);
        url_of(url, sizeof(url), "127.0.0.1", sv->port);
        for (int i = 0; i < 2; i++) {
            x[ci][i] = xfer_new(&clients[ci]);
            req_init(&req, url);
            xfer_submit(x[ci][i], &req);
            xfer_wait(x[ci][i], WAIT_MS);
            expect(i == 0 ? "chunked" : "chunked again", x[ci][i], 0, 200, body);
        }
        srv_counts(sv, NULL, &accepted, NULL);
        check(accepted == 1, "%s chunked: both responses on one connection (%d accepted)",
              clients[ci].name, accepted);
        srv_stop(sv);
    }
    same("2 chunked", x[0][0], x[1][0], 1);
    same("2 chunked again", x[0][1], x[1][1], 1);
    assert_int_equal(n_failed, f0);
}

/* 3. A body delimited by the end of the connection (no Content-Length, not chunked). */
static void test_close_delimited(void **state)
{
    int f0 = begin("3 close-delimited body");
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
                               "{\"id\":\"c3\",\"text\":\"until the end\"}";
    struct srv_script sc = {.resp = {resp}, .split = 52, .gap_us = 20000, .then = SRV_CLOSE};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = run_one(&clients[ci], &sc, NULL, &x[ci]);

        expect("close-delimited", x[ci], 0, 200, "{\"id\":\"c3\",\"text\":\"until the end\"}");
        srv_stop(sv);
    }
    same("3 close-delimited", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* 4. An interim 100 Continue before the real response. */
static void test_interim_100(void **state)
{
    int f0 = begin("4 100 Continue before the 200");
    static const char resp[] = "HTTP/1.1 100 Continue\r\n\r\n"
                               "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Content-Length: 11\r\n\r\n{\"ok\":true}";
    struct srv_script sc = {.resp = {resp}, .split = 25, .gap_us = 20000, .then = SRV_KEEP};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = run_one(&clients[ci], &sc, NULL, &x[ci]);

        expect("100 then 200", x[ci], 0, 200, "{\"ok\":true}");
        srv_stop(sv);
    }
    same("4 interim", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* 5. The request as the server saw it: request line, Host, the extra headers, Content-Type,
 * Content-Length and the exact body (a large one: the write takes several turns). */
static void test_request_seen(void **state)
{
    int f0 = begin("5 the request on the wire");
    static const char tp[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    char *r200 = resp_cl(200, "OK", NULL, ok_body);
    struct srv_script sc = {.resp = {r200}, .then = SRV_KEEP};
    const size_t body_len = 600 * 1024;
    char *want = malloc(body_len);
    struct xfer *x[2];

    (void)state;
    assert_non_null(want);
    /* JSON with a long string of printable, position-dependent bytes */
    memcpy(want, "{\"model\":\"m\",\"input\":\"", 22);
    for (size_t i = 22; i < body_len - 2; i++)
        want[i] = (char)('a' + (i * 7 + i / 26) % 26);
    memcpy(want + body_len - 2, "\"}", 2);
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        const struct srv_req *r;
        struct srv *sv;
        char v[256], host[64];
        int n_reqs = 0;

        memset(&req, 0, sizeof(req));
        req.headers[0] = "Authorization: Bearer x";
        req.headers[1] = "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        req.headers[2] = "X-Extra: a  b";
        req.body = malloc(body_len);
        assert_non_null(req.body);
        memcpy(req.body, want, body_len);
        req.body_len = body_len;
        req.timeout_ms = 5000;
        req.max_response_bytes = 1024 * 1024;
        sv = run_one(&clients[ci], &sc, &req, &x[ci]);
        expect("request", x[ci], 0, 200, ok_body);
        srv_counts(sv, &n_reqs, NULL, NULL);
        check(n_reqs == 1, "%s request: one request recorded (%d)", clients[ci].name, n_reqs);
        r = srv_req_at(sv, 0);
        if (r != NULL) {
            const char *nm = clients[ci].name;

            check(strcmp(r->line, "POST " PATH " HTTP/1.1") == 0, "%s: request line \"%s\"", nm,
                  r->line);
            snprintf(host, sizeof(host), "127.0.0.1:%u", (unsigned)sv->port);
            check(req_header(r, "Host", v, sizeof(v)) == 1 && strcmp(v, host) == 0,
                  "%s: one Host header \"%s\" (got \"%s\")", nm, host, v);
            check(req_header(r, "Authorization", v, sizeof(v)) == 1 && strcmp(v, "Bearer x") == 0,
                  "%s: Authorization as given (\"%s\")", nm, v);
            check(req_header(r, "traceparent", v, sizeof(v)) == 1 && strcmp(v, tp) == 0,
                  "%s: traceparent as given (\"%s\")", nm, v);
            check(req_header(r, "X-Extra", v, sizeof(v)) == 1 && strcmp(v, "a  b") == 0,
                  "%s: X-Extra as given (\"%s\")", nm, v);
            check(req_header(r, "Content-Type", v, sizeof(v)) == 1 &&
                      strcmp(v, "application/json") == 0,
                  "%s: one Content-Type: application/json (\"%s\")", nm, v);
            check(req_header(r, "Content-Length", v, sizeof(v)) == 1 &&
                      strtoull(v, NULL, 10) == body_len,
                  "%s: Content-Length %zu (\"%s\")", nm, body_len, v);
            check(req_header(r, "Transfer-Encoding", NULL, 0) == 0 &&
                      req_header(r, "Expect", NULL, 0) == 0,
                  "%s: no Transfer-Encoding, no Expect", nm);
            check(r->body_len == body_len && memcmp(r->body, want, body_len) == 0,
                  "%s: the exact %zu body bytes (got %zu)", nm, body_len, r->body_len);
            /* proof that each run took the intended client: libcurl always sends its default
             * "Accept: * / *", the built-in client sends only the headers it was given */
            if (ci == 0)
                check(req_header(r, "Accept", NULL, 0) == 0,
                      "native: the built-in client carried it (no libcurl Accept header)");
            else
                check(req_header(r, "Accept", v, sizeof(v)) == 1 && strcmp(v, "*/*") == 0,
                      "curl: libcurl carried it (Accept: */*)");
        }
        srv_stop(sv);
    }
    same("5 request", x[0], x[1], 1);
    free(want);
    free(r200);
    assert_int_equal(n_failed, f0);
}

/* n sequential requests to one server; the transfers in x. */
static void sequential(struct client *cl, struct srv *sv, int n, struct xfer **x)
{
    char url[128];

    url_of(url, sizeof(url), "127.0.0.1", sv->port);
    for (int i = 0; i < n; i++) {
        struct rt_upstream_request req;

        x[i] = xfer_new(cl);
        req_init(&req, url);
        xfer_submit(x[i], &req);
        xfer_wait(x[i], WAIT_MS);
    }
}

/* 6. Keep-alive: three sequential requests on a server that keeps connections open arrive on
 * one connection. */
static void test_keep_alive(void **state)
{
    int f0 = begin("6 keep-alive reuse");
    char *r200 = resp_cl(200, "OK", NULL, ok_body);
    struct srv_script sc = {.resp = {r200}, .then = SRV_KEEP};
    struct xfer *x[2][3];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = srv_start(&sc);
        int accepted = 0, n_reqs = 0;

        assert_non_null(sv);
        sequential(&clients[ci], sv, 3, x[ci]);
        for (int i = 0; i < 3; i++)
            expect("keep-alive", x[ci][i], 0, 200, ok_body);
        srv_counts(sv, &n_reqs, &accepted, NULL);
        check(n_reqs == 3 && accepted == 1,
              "%s keep-alive: 3 requests on 1 connection (%d requests, %d connections)",
              clients[ci].name, n_reqs, accepted);
        for (int i = 0; i < n_reqs; i++) {
            const struct srv_req *r = srv_req_at(sv, i);

            check(r->conn == 1 && r->nth == i + 1, "%s keep-alive: request %d is #%d on conn %d",
                  clients[ci].name, i + 1, r->nth, r->conn);
        }
        srv_stop(sv);
    }
    for (int i = 0; i < 3; i++)
        same("6 keep-alive", x[0][i], x[1][i], 1);
    free(r200);
    assert_int_equal(n_failed, f0);
}

/* 6b. No reuse when the response forbids it: "Connection: close", and an HTTP/1.0 response
 * without keep-alive, on a server that would in fact keep the connection open. */
static void test_no_reuse(void **state)
{
    int f0 = begin("6b no reuse after Connection: close or HTTP/1.0");
    static const char close_resp[] = "HTTP/1.1 200 OK\r\nConnection: close\r\n"
                                     "Content-Length: 11\r\n\r\n{\"ok\":true}";
    static const char h10_resp[] = "HTTP/1.0 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
    struct xfer *x[2][2][2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        for (int k = 0; k < 2; k++) {
            struct srv_script sc = {.resp = {k == 0 ? close_resp : h10_resp}, .then = SRV_KEEP};
            struct srv *sv = srv_start(&sc);
            int accepted = 0, n_reqs = 0;

            assert_non_null(sv);
            sequential(&clients[ci], sv, 2, x[ci][k]);
            for (int i = 0; i < 2; i++)
                expect(k == 0 ? "Connection: close" : "HTTP/1.0", x[ci][k][i], 0, 200,
                       "{\"ok\":true}");
            srv_counts(sv, &n_reqs, &accepted, NULL);
            check(n_reqs == 2 && accepted == 2,
                  "%s %s: the second request on a new connection (%d requests, %d connections)",
                  clients[ci].name, k == 0 ? "Connection: close" : "HTTP/1.0", n_reqs, accepted);
            srv_stop(sv);
        }
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2; i++)
            same(k == 0 ? "6b Connection: close" : "6b HTTP/1.0", x[0][k][i], x[1][k][i], 1);
    assert_int_equal(n_failed, f0);
}

/* The TLS group's server: when set, a connection that resumes a session gets no new ticket, so
 * the client has one session for every connection after the first (server thread reads it). */
static _Atomic int srv_no_ticket_on_resume;

static int srv_hello_cb(SSL *s, int *al, void *arg)
{
    const unsigned char *p;
    size_t len;

    (void)al;
    (void)arg;
    if (atomic_load(&srv_no_ticket_on_resume) &&
        SSL_client_hello_get0_ext(s, TLSEXT_TYPE_psk, &p, &len) == 1)
        SSL_set_num_tickets(s, 0);
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* 6c. Over TLS, the built-in client: every new connection after the first resumes the session,
 * also when one session must serve several connections (the server gives no new ticket on a
 * resumed connection; OpenSSL's client marks a TLS 1.3 session used once a resumption with it
 * completes, so each connection offers a copy of its own). Four requests, each on a new
 * connection (the server closes after each answer). */
static void test_tls_resume(void **state)
{
    int f0 = begin("6c TLS: every new connection resumes, one session offered again");
    char *r200 = resp_cl(200, "OK", "Connection: close\r\n", ok_body);
    struct srv_script sc = {.resp = {r200}, .then = SRV_CLOSE};
    struct rt_upstream_stats a, b;
    struct xfer *x[4];
    struct srv *sv;
    int accepted = 0;

    (void)state;
    if (!tls_mode) {
        free(r200);
        return; /* over https only */
    }
    atomic_store(&srv_no_ticket_on_resume, 1);
    sv = srv_start(&sc);
    assert_non_null(sv);
    rt_upstream_get_stats(clients[0].up, &a);
    sequential(&clients[0], sv, 4, x);
    rt_upstream_get_stats(clients[0].up, &b);
    atomic_store(&srv_no_ticket_on_resume, 0);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 4; i++)
        expect("TLS resumption", x[i], 0, 200, ok_body);
    pthread_mutex_unlock(&mu);
    srv_counts(sv, NULL, &accepted, NULL);
    check(accepted == 4 && b.tls_handshakes - a.tls_handshakes == 4 &&
              b.tls_resumed - a.tls_resumed == 3,
          "native TLS: 4 connections, 4 handshakes, the last 3 resumed (%d, %llu, %llu)", accepted,
          (unsigned long long)(b.tls_handshakes - a.tls_handshakes),
          (unsigned long long)(b.tls_resumed - a.tls_resumed));
    srv_stop(sv);
    free(r200);
    assert_int_equal(n_failed, f0);
}

/* 7. Dead kept-alive connections. a: the server closes every connection right after a complete
 * response that did not say "Connection: close": every next request still succeeds. b: the
 * server keeps the connection, then closes it without answering on its second request: that
 * request is sent again, once, on a new connection, and succeeds. */
static void test_dead_keep_alive(void **state)
{
    int f0 = begin("7 dead kept-alive connection");
    char *r200 = resp_cl(200, "OK", NULL, ok_body);
    struct srv_script sa = {.resp = {r200}, .then = SRV_CLOSE};
    struct srv_script sb = {.resp = {r200}, .then = SRV_KEEP, .drop_nth = 2};
    struct xfer *xa[2][3], *xb[2][2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        const char *nm = clients[ci].name;
        struct srv *sv = srv_start(&sa);
        int accepted = 0, n_reqs = 0, lost = 0;

        assert_non_null(sv);
        sequential(&clients[ci], sv, 3, xa[ci]);
        for (int i = 0; i < 3; i++)
            expect("closed after each response", xa[ci][i], 0, 200, ok_body);
        srv_counts(sv, &n_reqs, &accepted, &lost);
        check(n_reqs == 3 && accepted == 3 && lost == 0,
              "%s closed after each: 3 requests on 3 connections (%d requests, %d connections)", nm,
              n_reqs, accepted);
        srv_stop(sv);

        sv = srv_start(&sb);
        assert_non_null(sv);
        sequential(&clients[ci], sv, 2, xb[ci]);
        expect("first on the connection", xb[ci][0], 0, 200, ok_body);
        expect("dropped on the kept connection, sent again", xb[ci][1], 0, 200, ok_body);
        srv_counts(sv, &n_reqs, &accepted, NULL);
        check(n_reqs == 3 && accepted == 2,
              "%s dropped: 3 requests seen on 2 connections (%d requests, %d connections)", nm,
              n_reqs, accepted);
        if (n_reqs == 3) {
            const struct srv_req *r0 = srv_req_at(sv, 0), *r1 = srv_req_at(sv, 1),
                                 *r2 = srv_req_at(sv, 2);

            check(r0->conn == 1 && r0->nth == 1 && r1->conn == 1 && r1->nth == 2 && r2->conn == 2 &&
                      r2->nth == 1,
                  "%s dropped: conn 1 #1, conn 1 #2 (dropped), conn 2 #1 (got %d#%d %d#%d "
                  "%d#%d)",
                  nm, r0->conn, r0->nth, r1->conn, r1->nth, r2->conn, r2->nth);
            check(r2->body_len == r1->body_len && r2->body_len == strlen(REQ_BODY) &&
                      memcmp(r2->body, REQ_BODY, r2->body_len) == 0,
                  "%s dropped: the retry carries the whole body again", nm);
        }
        srv_stop(sv);
    }
    for (int i = 0; i < 3; i++)
        same("7a closed after each", xa[0][i], xa[1][i], 1);
    same("7b dropped then retried", xb[0][1], xb[1][1], 1);
    free(r200);
    assert_int_equal(n_failed, f0);
}

/* 8. A fresh connection closed after the request without an answer: an error, not a retry. */
static void test_fresh_closed(void **state)
{
    int f0 = begin("8 fresh connection closed without an answer");
    struct srv_script sc = {.resp = {"unused"}, .drop_nth = 1};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = run_one(&clients[ci], &sc, NULL, &x[ci]);
        int n_reqs = 0;

        expect("closed unanswered", x[ci], TG_EIO, 0, "");
        srv_counts(sv, &n_reqs, NULL, NULL);
        check(n_reqs == 1, "%s closed unanswered: sent once (%d)", clients[ci].name, n_reqs);
        srv_stop(sv);
    }
    same("8 closed unanswered", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* 9. Malformed or truncated responses: a status line that is not HTTP, a body shorter than its
 * Content-Length, a chunked body cut before its last chunk. */
static void test_malformed(void **state)
{
    int f0 = begin("9 malformed and truncated responses");
    struct srv_script bad = {.resp = {"FOO 200\r\n\r\n"}, .then = SRV_KEEP};
    struct srv_script cut_cl = {.resp = {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
                                         "{\"only\":\"part of it\"}"},
                                .then = SRV_CLOSE};
    struct srv_script cut_ch = {.resp = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                         "5\r\nhello\r\n6\r\n world\r\n"},
                                .then = SRV_CLOSE};
    struct xfer *x[2][3];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv *sv = run_one(&clients[ci], &bad, NULL, &x[ci][0]);

        expect("bad status line", x[ci][0], TG_EIO, 0, "");
        srv_stop(sv);
        sv = run_one(&clients[ci], &cut_cl, NULL, &x[ci][1]);
        expect("body shorter than Content-Length", x[ci][1], TG_EIO, 200, NULL);
        srv_stop(sv);
        sv = run_one(&clients[ci], &cut_ch, NULL, &x[ci][2]);
        expect("chunked body cut short", x[ci][2], TG_EIO, 200, NULL);
        srv_stop(sv);
    }
    same("9 bad status line", x[0][0], x[1][0], 1);
    same("9 short Content-Length body", x[0][1], x[1][1], 1);
    same("9 cut chunked body", x[0][2], x[1][2], 1);
    assert_int_equal(n_failed, f0);
}

/* 10. max_response_bytes: a body of exactly the cap passes; one byte more (Content-Length or
 * chunked) is TG_ETOOBIG. */
static void test_too_big(void **state)
{
    int f0 = begin("10 max_response_bytes");
    const size_t cap = 1000;
    char body[1600];
    char *at_cap, *over, *chunked;
    struct xfer *x[2][3];
    size_t off;

    (void)state;
    memset(body, 'x', sizeof(body));
    body[0] = '"';
    body[cap - 1] = '"';
    body[cap] = '\0';
    at_cap = resp_cl(200, "OK", NULL, body);
    body[cap - 1] = 'x';
    body[cap] = '"';
    body[cap + 1] = '\0';
    over = resp_cl(200, "OK", NULL, body);
    chunked = malloc(2048);
    assert_non_null(chunked);
    off = (size_t)snprintf(chunked, 2048, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        off += (size_t)snprintf(chunked + off, 2048 - off, "1F4\r\n");
        memset(chunked + off, 'y', 500);
        off += 500;
        off += (size_t)snprintf(chunked + off, 2048 - off, "\r\n");
    }
    snprintf(chunked + off, 2048 - off, "0\r\n\r\n");
    for (int ci = 0; ci < 2; ci++) {
        struct srv_script sc = {.resp = {at_cap, over, chunked}, .then = SRV_KEEP};
        struct srv *sv = srv_start(&sc);
        char url[128];

        assert_non_null(sv);
        url_of(url, sizeof(url), "127.0.0.1", sv->port);
        for (int i = 0; i < 3; i++) {
            struct rt_upstream_request req;

            x[ci][i] = xfer_new(&clients[ci]);
            req_init(&req, url);
            req.max_response_bytes = cap;
            xfer_submit(x[ci][i], &req);
            xfer_wait(x[ci][i], WAIT_MS);
        }
        body[cap - 1] = '"';
        body[cap] = '\0';
        expect("body == cap", x[ci][0], 0, 200, body);
        expect("Content-Length body == cap + 1", x[ci][1], TG_ETOOBIG, 200, NULL);
        expect("chunked body > cap", x[ci][2], TG_ETOOBIG, 200, NULL);
        srv_stop(sv);
    }
    /* the part of an over-sized body kept before the cap was seen depends on how the bytes
     * were split by the reads: not compared */
    same("10 at cap", x[0][0], x[1][0], 1);
    same("10 over cap (Content-Length)", x[0][1], x[1][1], 0);
    same("10 over cap (chunked)", x[0][2], x[1][2], 0);
    free(at_cap);
    free(over);
    free(chunked);
    assert_int_equal(n_failed, f0);
}

/* 11. A server that never answers: TG_ETIMEOUT after timeout_ms. */
static void test_timeout(void **state)
{
    int f0 = begin("11 total timeout");
    struct srv_script sc = {.resp = {NULL}};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        struct srv *sv;

        req_init(&req, "");
        req.timeout_ms = 300;
        sv = run_one(&clients[ci], &sc, &req, &x[ci]);
        expect("no answer", x[ci], TG_ETIMEOUT, 0, "");
        check(elapsed_ms(x[ci]) >= 250 && elapsed_ms(x[ci]) <= 3000,
              "%s no answer: on_done after 300 ms, within 3 s (%u ms)", clients[ci].name,
              elapsed_ms(x[ci]));
        srv_stop(sv);
    }
    same("11 timeout", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* The stream payload: SSE-like lines, position-checkable. */
static size_t stream_payload(char *b, size_t cap, size_t want)
{
    size_t n = 0;

    for (int i = 0; n < want; i++) {
        int w = snprintf(b + n, cap - n, "data: {\"i\":%05d,\"pad\":\"%.*s\"}\n\n", i, 10 + i % 40,
                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");

        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    return n;
}

/* A chunked 200 carrying p[0..n) in chunks of varying sizes. New, free(). */
static char *resp_chunked(const char *p, size_t n)
{
    size_t cap = n + 64 * (n / 100 + 1) + 256;
    char *b = malloc(cap);
    size_t off, at = 0;
    int k = 0;

    assert_non_null(b);
    off = (size_t)snprintf(b, cap,
                           "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n");
    while (at < n) {
        static const size_t sizes[] = {700, 3000, 1, 1500, 5000, 333, 2048};
        size_t c = sizes[k++ % 7];

        if (c > n - at)
            c = n - at;
        off += (size_t)snprintf(b + off, cap - off, "%zx\r\n", c);
        memcpy(b + off, p + at, c);
        off += c;
        at += c;
        off += (size_t)snprintf(b + off, cap - off, "\r\n");
    }
    snprintf(b + off, cap - off, "0\r\n\r\n");
    return b;
}

/* A stream request: recv_buffer_bytes STREAM_RECV_BYTES, the given timeouts. */
static void req_stream(struct rt_upstream_request *req, long timeout_ms, long idle_ms)
{
    req_init(req, "");
    req->stream = 1;
    req->recv_buffer_bytes = STREAM_RECV_BYTES;
    req->timeout_ms = timeout_ms;
    req->idle_timeout_ms = idle_ms;
}

/* The stream checks: every byte once, in order, no piece over the receive buffer, no call while
 * paused or after on_done. */
static void expect_stream(const char *scn, const struct xfer *x, const char *p, size_t n)
{
    const char *nm = x->cl->name;

    check(x->data_len == n && !x->data_overflow && memcmp(x->data, p, n) == 0,
          "%s %s: all %zu bytes exactly once, in order (got %zu)", nm, scn, n, x->data_len);
    check(x->max_piece <= STREAM_RECV_BYTES, "%s %s: no on_data over %d bytes (largest %zu)", nm,
          scn, STREAM_RECV_BYTES, x->max_piece);
    check(!x->data_while_paused && !x->data_after_done,
          "%s %s: no on_data while paused or after on_done", nm, scn);
    check(x->body_len == 0, "%s %s: no body for a 2xx stream (%zu)", nm, scn, x->body_len);
}

/* 12. A chunked stream of ~20 KB in several writes, paused by every third on_data and unpaused
 * from this thread shortly after. */
static void test_stream_pause(void **state)
{
    int f0 = begin("12 stream with pauses");
    static char payload[24 * 1024];
    size_t n = stream_payload(payload, sizeof(payload), 20 * 1024);
    char *resp = resp_chunked(payload, n);
    struct srv_script sc = {.resp = {resp}, .piece = 4096, .gap_us = 10000, .then = SRV_KEEP};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        struct srv *sv = srv_start(&sc);
        char url[128];

        assert_non_null(sv);
        url_of(url, sizeof(url), "127.0.0.1", sv->port);
        req_stream(&req, 5000, 5000);
        req.url = url;
        x[ci] = xfer_new(&clients[ci]);
        x[ci]->pause_every = 3;
        xfer_submit(x[ci], &req);
        xfer_wait(x[ci], WAIT_MS);
        expect("paused stream", x[ci], 0, 200, NULL);
        expect_stream("paused stream", x[ci], payload, n);
        check(x[ci]->pauses >= 5, "%s paused stream: paused %u times", clients[ci].name,
              x[ci]->pauses);
        srv_stop(sv);
    }
    same("12 paused stream", x[0], x[1], 1);
    free(resp);
    assert_int_equal(n_failed, f0);
}

/* 12b. Every piece of a stream paused once (the last one too), with Content-Length framing and
 * with chunked framing, on a connection the server keeps open: the transfer ends as soon as the
 * last byte is taken, not at the idle timeout. Pins a defect of the built-in client: when the
 * paused bytes were the last of a Content-Length body, the unpause delivered them but never
 * noticed the end, and the stream failed with TG_ETIMEOUT at the idle timeout. */
static void test_stream_pause_last(void **state)
{
    int f0 = begin("12b stream paused on its last piece");
    static char payload[8 * 1024];
    size_t n = stream_payload(payload, sizeof(payload), 5000);
    char *resp_len, *resp_ch = resp_chunked(payload, n);
    struct xfer *x[2][2];
    const long idle_ms = 4000;

    (void)state;
    payload[n] = '\0';
    resp_len = malloc(n + 256);
    assert_non_null(resp_len);
    snprintf(resp_len, n + 256,
             "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n%s",
             n, payload);
    for (int ci = 0; ci < 2; ci++) {
        for (int k = 0; k < 2; k++) {
            struct srv_script sc = {.resp = {k == 0 ? resp_len : resp_ch}, .then = SRV_KEEP};
            struct rt_upstream_request req;
            struct srv *sv = srv_start(&sc);
            const char *scn = k == 0 ? "Content-Length stream" : "chunked stream";
            char url[128];

            assert_non_null(sv);
            url_of(url, sizeof(url), "127.0.0.1", sv->port);
            req_stream(&req, 5000, idle_ms);
            req.url = url;
            x[ci][k] = xfer_new(&clients[ci]);
            x[ci][k]->pause_each_offset = 1;
            xfer_submit(x[ci][k], &req);
            xfer_wait(x[ci][k], WAIT_MS);
            expect(scn, x[ci][k], 0, 200, NULL);
            expect_stream(scn, x[ci][k], payload, n);
            check(elapsed_ms(x[ci][k]) < (unsigned)idle_ms - 1000,
                  "%s %s: ends with its last byte, not at the idle timeout (%u ms)",
                  clients[ci].name, scn, elapsed_ms(x[ci][k]));
            srv_stop(sv);
        }
    }
    same("12b Content-Length stream", x[0][0], x[1][0], 1);
    same("12b chunked stream", x[0][1], x[1][1], 1);
    free(resp_len);
    free(resp_ch);
    assert_int_equal(n_failed, f0);
}

/* 13. Stream idle timeout: headers and one chunk, then silence. */
static void test_stream_idle(void **state)
{
    int f0 = begin("13 stream idle timeout");
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n"
                               "d\r\ndata: first\n\n\r\n";
    struct srv_script sc = {.resp = {resp}, .then = SRV_STALL};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        struct srv *sv;

        req_stream(&req, 1000, 1000);
        sv = run_one(&clients[ci], &sc, &req, &x[ci]);
        expect("idle stream", x[ci], TG_ETIMEOUT, 200, "");
        check(x[ci]->data_len == 13 && memcmp(x[ci]->data, "data: first\n\n", 13) == 0,
              "%s idle stream: the first chunk was delivered (%zu bytes)", clients[ci].name,
              x[ci]->data_len);
        /* the module keeps the idle clock itself for both clients (libcurl's own low-speed
         * limit averages over ~5 s and would end the stream 6-7 s after the last byte) */
        check(elapsed_ms(x[ci]) >= 900 && elapsed_ms(x[ci]) <= 3000,
              "%s idle stream: timed out after 1 s idle, within 3 s (%u ms)", clients[ci].name,
              elapsed_ms(x[ci]));
        srv_stop(sv);
    }
    same("13 idle stream", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* 13b. A stream whose server never answers: timeout_ms bounds connect + first byte (the header
 * contract), even with a longer idle_timeout_ms. */
static void test_stream_first_byte(void **state)
{
    int f0 = begin("13b stream first-byte timeout");
    struct srv_script sc = {.resp = {NULL}};
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        struct srv *sv;

        req_stream(&req, 500, 2000);
        sv = run_one(&clients[ci], &sc, &req, &x[ci]);
        expect("silent stream", x[ci], TG_ETIMEOUT, 0, "");
        /* timeout_ms bounds connect + first byte on both clients (libcurl has no such
         * timeout of its own: the module's timer applies it) */
        check(elapsed_ms(x[ci]) >= 450 && elapsed_ms(x[ci]) <= 1500,
              "%s silent stream: timed out after timeout_ms 500, not idle 2000 (%u ms)",
              clients[ci].name, elapsed_ms(x[ci]));
        srv_stop(sv);
    }
    same("13b silent stream", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* 14. Cancel: a stream whose headers and first chunk arrived and then stalls, the same stream
 * while that chunk is held by a pause that is never lifted, and a request that was never
 * answered. One on_done with TG_ECLOSED; a second cancel and an unpause of the dead handle are
 * harmless. */
static void test_cancel(void **state)
{
    int f0 = begin("14 cancel");
    static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n"
                               "d\r\ndata: first\n\n\r\n";
    struct srv_script stall = {.resp = {resp}, .then = SRV_STALL};
    struct srv_script silent = {.resp = {NULL}};
    struct xfer *x[2][3];
    static const char *const what[] = {"cancelled mid-stream", "cancelled before an answer",
                                       "cancelled while paused"};

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        const char *nm = clients[ci].name;

        for (int k = 0; k < 3; k++) {
            struct srv *sv = srv_start(k == 1 ? &silent : &stall);
            struct rt_upstream_request req;
            char url[128];
            int reqs = 0;
            uint64_t end;

            assert_non_null(sv);
            url_of(url, sizeof(url), "127.0.0.1", sv->port);
            if (k != 1)
                req_stream(&req, 10000, 10000);
            else
                req_init(&req, "");
            req.url = url;
            x[ci][k] = xfer_new(&clients[ci]);
            /* k == 2: the first on_data pauses and is never unpaused */
            x[ci][k]->pause_every = k == 2 ? 1 : 0;
            x[ci][k]->hold = k == 2;
            xfer_submit(x[ci][k], &req);
            if (k != 1) {
                check(xfer_wait_data(x[ci][k], 1, 5000), "%s cancel: the first chunk arrived", nm);
            } else {
                end = tg_now_mono_us() + 5000000u;
                while (reqs == 0 && tg_now_mono_us() < end) {
                    srv_counts(sv, &reqs, NULL, NULL);
                    tg_sleep_ms(5);
                }
                check(reqs == 1, "%s cancel: the request reached the server", nm);
            }
            rt_upstream_cancel(clients[ci].up, x[ci][k]->handle);
            xfer_wait(x[ci][k], WAIT_MS);
            rt_upstream_cancel(clients[ci].up, x[ci][k]->handle);
            rt_upstream_unpause(clients[ci].up, x[ci][k]->handle);
            tg_sleep_ms(200);
            pthread_mutex_lock(&mu);
            expect(what[k], x[ci][k], TG_ECLOSED, k == 1 ? 0 : 200, "");
            if (k == 2)
                check(x[ci][k]->data_len == 0 && x[ci][k]->data_calls == 1,
                      "%s cancelled while paused: nothing taken, one on_data (%u)", nm,
                      x[ci][k]->data_calls);
            pthread_mutex_unlock(&mu);
            srv_stop(sv);
        }
    }
    same("14 cancel mid-stream", x[0][0], x[1][0], 1);
    same("14 cancel before an answer", x[0][1], x[1][1], 1);
    same("14 cancel while paused", x[0][2], x[1][2], 1);
    assert_int_equal(n_failed, f0);
}

/* Wait until the server has n requests (5 s at most). 1 when it has. */
static int srv_wait_reqs(struct srv *sv, int n)
{
    uint64_t end = tg_now_mono_us() + 5000000u;
    int reqs = 0;

    do {
        srv_counts(sv, &reqs, NULL, NULL);
        if (reqs >= n)
            return 1;
        tg_sleep_ms(5);
    } while (tg_now_mono_us() < end);
    return 0;
}

/* The built-in client's connection counts, once closed[reason] or drained (reason -1) has grown
 * past the value in *was (ms at most). Returns the ms waited, or -1 when it did not grow. */
static int stats_wait(struct rt_upstream_stats *st, const struct rt_upstream_stats *was,
                      int reason, unsigned ms)
{
    uint64_t t0 = tg_now_mono_us();

    for (;;) {
        rt_upstream_get_stats(clients[0].up, st);
        if (reason < 0 ? st->drained > was->drained
                       : st->conns_closed[reason] > was->conns_closed[reason])
            return (int)((tg_now_mono_us() - t0) / 1000u);
        if (tg_now_mono_us() - t0 > (uint64_t)ms * 1000u)
            return -1;
        tg_sleep_ms(5);
    }
}

/* 14b. The built-in client keeps the connection of a cancelled transfer whose response is not a
 * stream and comes within 64 KiB and 2 s: read out and dropped, the next request goes on the
 * same connection. A response over 64 KiB, one that never comes, one that forbids reuse and a
 * stream close it; every close is counted by its reason. */
static void test_drain(void **state)
{
    int f0 = begin("14b cancelled transfer: connection drained and kept");
    static const char sse[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n"
                              "d\r\ndata: first\n\n\r\n";
    char *r200 = resp_cl(200, "OK", NULL, ok_body);
    char *rclose = resp_cl(200, "OK", "Connection: close\r\n", ok_body);
    char *pad = malloc(100 * 1024 + 1);
    char *rbig;
    enum { D_KEPT, D_BIG, D_CLOSE, D_SILENT, D_STREAM, D_N };
    static const char *const what[D_N] = {"a response to come", "a response over 64 KiB",
                                          "a Connection: close response", "no response",
                                          "a stream"};
    const struct srv_script sc[D_N] = {
        [D_KEPT] = {.resp = {r200}, .delay_us = 200000},
        [D_BIG] = {.resp = {NULL}, .delay_us = 200000}, /* resp set below */
        [D_CLOSE] = {.resp = {rclose}, .delay_us = 200000},
        [D_SILENT] = {.resp = {NULL}},
        [D_STREAM] = {.resp = {sse}, .then = SRV_STALL},
    };
    struct client *cl = &clients[0];

    (void)state;
    assert_non_null(pad);
    memset(pad, 'x', 100 * 1024);
    pad[100 * 1024] = '\0';
    rbig = resp_cl(200, "OK", NULL, pad);
    for (int k = 0; k < D_N; k++) {
        struct srv_script scr = sc[k];
        struct srv *sv;
        struct rt_upstream_request req;
        struct rt_upstream_stats was, st;
        char url[128];
        struct xfer *x = xfer_new(cl);
        int reason = k == D_KEPT ? -1 : k == D_CLOSE ? RT_UPC_NOT_REUSABLE : RT_UPC_CANCELLED;
        int waited;

        if (k == D_BIG)
            scr.resp[0] = rbig;
        sv = srv_start(&scr);
        assert_non_null(sv);
        url_of(url, sizeof(url), "127.0.0.1", sv->port);
        if (k == D_STREAM)
            req_stream(&req, 10000, 10000);
        else
            req_init(&req, "");
        req.url = url;
        xfer_submit(x, &req);
        if (k == D_STREAM)
            check(xfer_wait_data(x, 1, 5000), "drain, %s: the first chunk arrived", what[k]);
        else
            check(srv_wait_reqs(sv, 1), "drain, %s: the request reached the server", what[k]);
        rt_upstream_get_stats(cl->up, &was);
        rt_upstream_cancel(cl->up, x->handle);
        xfer_wait(x, WAIT_MS);
        pthread_mutex_lock(&mu);
        expect(what[k], x, TG_ECLOSED, k == D_STREAM ? 200 : 0, "");
        pthread_mutex_unlock(&mu);
        waited = stats_wait(&st, &was, reason, 8000);
        check(waited >= 0, "drain, %s: counted as %s", what[k],
              reason < 0 ? "drained" : rt_upstream_close_reason(reason));
        /* nothing else closed it, and a connection was kept only when drained */
        for (int r = 0; r < RT_UPC_N; r++)
            check(st.conns_closed[r] - was.conns_closed[r] == (r == reason ? 1u : 0u),
                  "drain, %s: %llu more closed as %s", what[k],
                  (unsigned long long)(st.conns_closed[r] - was.conns_closed[r]),
                  rt_upstream_close_reason(r));
        check(st.drained - was.drained == (k == D_KEPT ? 1u : 0u), "drain, %s: %llu drained",
              what[k], (unsigned long long)(st.drained - was.drained));
        if (k == D_SILENT)
            check(waited >= 1500, "drain, %s: closed after the 2 s bound (%d ms)", what[k],
                  waited);
        else
            check(waited >= 0 && waited < 1500, "drain, %s: settled within 1.5 s (%d ms)",
                  what[k], waited);
        if (k == D_KEPT) {
            /* the next request: on the drained connection, its second request */
            struct xfer *y = xfer_new(cl);
            const struct srv_req *r;
            int accepted = 0;

            req_init(&req, url);
            xfer_submit(y, &req);
            xfer_wait(y, WAIT_MS);
            pthread_mutex_lock(&mu);
            expect("after a drain", y, 0, 200, ok_body);
            pthread_mutex_unlock(&mu);
            srv_counts(sv, NULL, &accepted, NULL);
            r = srv_req_at(sv, 1);
            check(accepted == 1 && r != NULL && r->conn == 1 && r->nth == 2,
                  "drain: the next request is the 2nd on the one connection (%d accepted, "
                  "conn %d #%d)",
                  accepted, r != NULL ? r->conn : 0, r != NULL ? r->nth : 0);
        }
        srv_stop(sv);
    }
    free(r200);
    free(rclose);
    free(rbig);
    free(pad);
    assert_int_equal(n_failed, f0);
}

/* 15. Connection refused. */
static void test_refused(void **state)
{
    int f0 = begin("15 connection refused");
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        uint16_t port = closed_port();
        char url[128];

        assert_true(port != 0);
        url_of(url, sizeof(url), "127.0.0.1", port);
        req_init(&req, url);
        x[ci] = xfer_new(&clients[ci]);
        xfer_submit(x[ci], &req);
        xfer_wait(x[ci], WAIT_MS);
        expect("refused", x[ci], TG_EIO, 0, "");
        check(elapsed_ms(x[ci]) <= 3000, "%s refused: reported within 3 s (%u ms)",
              clients[ci].name, elapsed_ms(x[ci]));
    }
    same("15 refused", x[0], x[1], 1);
    assert_int_equal(n_failed, f0);
}

/* 15b. An answer before the request was written (a 413 after the headers of a body too large
 * for the server, which then reads nothing more): the answer is the outcome, not a timeout or a
 * send error. */
static void test_early_answer(void **state)
{
    int f0 = begin("15b early answer");
    static const char err_body[] = "{\"error\":{\"message\":\"too large\"}}";
    char *r413 = resp_cl(413, "Payload Too Large", "Connection: close\r\n", err_body);
    const size_t big = 16u * 1024u * 1024u;
    struct xfer *x[2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct srv_script sc = {.resp = {r413}, .early = 1};
        struct srv *sv = srv_start(&sc);
        struct rt_upstream_request req;
        char url[128];

        assert_non_null(sv);
        url_of(url, sizeof(url), "127.0.0.1", sv->port);
        req_init(&req, url);
        free(req.body);
        req.body = malloc(big);
        assert_non_null(req.body);
        memset(req.body, ' ', big);
        req.body_len = big;
        x[ci] = xfer_new(&clients[ci]);
        xfer_submit(x[ci], &req);
        xfer_wait(x[ci], WAIT_MS);
        expect("early 413", x[ci], 0, 413, err_body);
        check(elapsed_ms(x[ci]) <= 3000, "%s early answer: reported within 3 s (%u ms)",
              clients[ci].name, elapsed_ms(x[ci]));
        srv_stop(sv);
    }
    same("15b early answer", x[0], x[1], 1);
    free(r413);
    assert_int_equal(n_failed, f0);
}

/* 16. A non-2xx answer to a stream: on_data is not called, on_done has the status and body. */
static void test_stream_error(void **state)
{
    int f0 = begin("16 non-2xx stream");
    static const char err_body[] = "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}";
    char *r500 = resp_cl(500, "Internal Server Error", NULL, err_body);
    static const char r503[] = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n"
                               "9\r\n{\"error\":\r\n7\r\n\"busy\"}\r\n0\r\n\r\n";
    struct xfer *x[2][2];

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        for (int k = 0; k < 2; k++) {
            struct srv_script sc = {.resp = {k == 0 ? r500 : r503}, .then = SRV_KEEP};
            struct rt_upstream_request req;
            struct srv *sv;

            req_stream(&req, 5000, 5000);
            sv = run_one(&clients[ci], &sc, &req, &x[ci][k]);
            if (k == 0) {
                expect("500 stream", x[ci][k], 0, 500, err_body);
                check(x[ci][k]->retry_after_s == -1, "%s 500 stream: no retry-after",
                      clients[ci].name);
            } else {
                expect("503 stream", x[ci][k], 0, 503, "{\"error\":\"busy\"}");
                check(x[ci][k]->retry_after_s == 3, "%s 503 stream: retry_after_s 3 (%ld)",
                      clients[ci].name, x[ci][k]->retry_after_s);
            }
            check(x[ci][k]->data_calls == 0, "%s %d stream: on_data not called (%u calls)",
                  clients[ci].name, k == 0 ? 500 : 503, x[ci][k]->data_calls);
            srv_stop(sv);
        }
    }
    same("16 500 stream", x[0][0], x[1][0], 1);
    same("16 503 stream", x[0][1], x[1][1], 1);
    free(r500);
    assert_int_equal(n_failed, f0);
}

/* Last: each upstream's counters agree with what on_done reported, nothing is left active, and
 * every transfer got exactly one on_done. */
static void test_stats(void **state)
{
    int f0 = begin("stats");

    (void)state;
    for (int ci = 0; ci < 2; ci++) {
        struct client *cl = &clients[ci];
        struct rt_upstream_stats st;
        uint64_t end = tg_now_mono_us() + 2000000u;

        /* on_done runs before the slot is released: active drops right after it */
        do {
            rt_upstream_get_stats(cl->up, &st);
            if (st.active == 0)
                break;
            tg_sleep_ms(5);
        } while (tg_now_mono_us() < end);
        pthread_mutex_lock(&mu);
        check(st.submitted == st.completed && st.active == 0,
              "%s stats: submitted %llu == completed %llu, active %llu == 0", cl->name,
              (unsigned long long)st.submitted, (unsigned long long)st.completed,
              (unsigned long long)st.active);
        check(st.completed == cl->n_done, "%s stats: completed %llu == on_done calls %llu",
              cl->name, (unsigned long long)st.completed, (unsigned long long)cl->n_done);
        check(st.cancelled == cl->n_cancelled && st.timeouts == cl->n_timeouts &&
                  st.too_big == cl->n_too_big && st.full == 0,
              "%s stats: cancelled %llu/%llu timeouts %llu/%llu too_big %llu/%llu full %llu",
              cl->name, (unsigned long long)st.cancelled, (unsigned long long)cl->n_cancelled,
              (unsigned long long)st.timeouts, (unsigned long long)cl->n_timeouts,
              (unsigned long long)st.too_big, (unsigned long long)cl->n_too_big,
              (unsigned long long)st.full);
        pthread_mutex_unlock(&mu);
        if (ci == 0) {
            /* only the first request for a name may go through libcurl (not resolved yet) */
            check(st.native + 1 >= st.submitted,
                  "native stats: %llu of %llu transfers through the built-in client",
                  (unsigned long long)st.native, (unsigned long long)st.submitted);
            /* over TLS: a handshake per connection, and a server that closes after each
             * response (no_reuse) sees the session of the connection before resumed */
            if (tls_mode)
                check(st.tls_handshakes > 0 && st.tls_resumed > 0,
                      "native stats: %llu TLS handshakes, %llu resumed",
                      (unsigned long long)st.tls_handshakes,
                      (unsigned long long)st.tls_resumed);
            else
                check(st.tls_handshakes == 0, "native stats: no TLS handshake over http");
            {
                uint64_t closed = 0;

                for (int r = 0; r < RT_UPC_N; r++)
                    closed += st.conns_closed[r];
                /* open = opened - closed: what the pool holds, within its bound */
                check(st.conns_opened >= closed && st.conns_opened - closed <= 16 &&
                          st.conns_closed[RT_UPC_SHUTDOWN] == 0,
                      "native stats: %llu connections opened, %llu closed (%llu failed)",
                      (unsigned long long)st.conns_opened, (unsigned long long)closed,
                      (unsigned long long)st.conns_closed[RT_UPC_FAILED]);
            }
        } else {
            check(st.native == 0 && st.tls_handshakes == 0,
                  "curl stats: nothing through the built-in client (%llu, %llu handshakes)",
                  (unsigned long long)st.native, (unsigned long long)st.tls_handshakes);
        }
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < pool_used; i++) {
        const struct xfer *x = &pool[i];

        if (x->submitted && (x->dones != 1 || x->data_after_done))
            check(0, "transfer %d (%s): %d on_done calls, on_data after on_done %d", i, x->cl->name,
                  x->dones, x->data_after_done);
    }
    pthread_mutex_unlock(&mu);
    check(1, "every transfer got exactly one on_done (%d transfers)", pool_used);
    assert_int_equal(n_failed, f0);
}

static int group_setup(void **state)
{
    pthread_condattr_t ca;
    char err[256] = "";

    (void)state;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rt_upstream_global_init() != 0)
        return -1;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_config cfg = {.max_transfers = 16,
                                         .max_host_connections = 4,
                                         .max_total_connections = 16,
                                         .embedded = 0,
                                         .native = ci == 0};

        memset(&clients[ci], 0, sizeof(clients[ci]));
        clients[ci].name = ci == 0 ? "native" : "curl";
        clients[ci].up = rt_upstream_create(&cfg, err, sizeof(err));
        if (clients[ci].up == NULL) {
            fprintf(stderr, "rt_upstream_create: %s\n", err);
            return -1;
        }
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int ci = 0; ci < 2; ci++)
        rt_upstream_destroy(&clients[ci].up);
    rt_upstream_global_fini();
    for (int i = 0; i < pool_used; i++) {
        free(pool[i].body);
        free(pool[i].data);
    }
    pool_used = 0;
    pthread_cond_destroy(&cv);
    printf("# %u checks, %u failed\n", n_checks, n_failed);
    return 0;
}

/* The TLS group's server side: a P-256 key, a self-signed certificate for 127.0.0.1 and
 * localhost (written to srv_ca_path for the requests), a server context. 0 or -1. */
static int tls_setup(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *n;
    X509V3_CTX v3;
    X509_EXTENSION *e;
    FILE *f;
    int fd, ok = 0;

    if (k == NULL || x == NULL)
        goto out;
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1, -1,
                               0);
    X509_set_issuer_name(x, n);
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "IP:127.0.0.1,IP:::1,DNS:localhost");
    if (e == NULL || X509_add_ext(x, e, -1) != 1)
        goto out;
    X509_EXTENSION_free(e);
    if (X509_sign(x, k, EVP_sha256()) <= 0)
        goto out;
    snprintf(srv_ca_path, sizeof(srv_ca_path), "/tmp/tollgate-upstream-ca.XXXXXX");
    fd = mkstemp(srv_ca_path);
    if (fd < 0)
        goto out;
    f = fdopen(fd, "w");
    if (f == NULL || PEM_write_X509(f, x) != 1) {
        if (f != NULL)
            fclose(f);
        goto out;
    }
    fclose(f);
    srv_tls = SSL_CTX_new(TLS_server_method());
    ok = srv_tls != NULL && SSL_CTX_use_certificate(srv_tls, x) == 1 &&
         SSL_CTX_use_PrivateKey(srv_tls, k) == 1;
    if (ok)
        SSL_CTX_set_client_hello_cb(srv_tls, srv_hello_cb, NULL);
out:
    X509_free(x);
    EVP_PKEY_free(k);
    return ok ? 0 : -1;
}

/* A deployment's api_base is queued with the resolver at start, under the host and port the
 * built-in client looks it up by; what that client leaves to libcurl is not queued. */
static void test_prefetch_names(void **state)
{
    /* url, then the host and port it is queued under or, when not queued, not found under */
    static const char *const cases[][4] = {
        {"https://prefetch-a.invalid:0443/v1", "prefetch-a.invalid", "443", "queued"},
        {"http://prefetch-b.invalid/openai/deployments", "prefetch-b.invalid", "80", "queued"},
        {"https://prefetch-c.invalid?x=1", "prefetch-c.invalid", "443", "queued"},
        {"http://prefetch-d.invalid:8080", "prefetch-d.invalid", "8080", "queued"},
        {"https://user:pw@prefetch-e.invalid/v1", "prefetch-e.invalid", "443", ""},
        {"https://user:pw@prefetch-e.invalid/v1", "user", "443", ""},
        {"https://prefetch-f.invalid:99999/v1", "prefetch-f.invalid", "99999", ""},
        {"https://prefetch-f.invalid:44x/v1", "prefetch-f.invalid", "44", ""},
        {"https://prefetch-f.invalid:/v1", "prefetch-f.invalid", "443", ""},
        {"https://prefetch]-h.invalid/v1", "prefetch]-h.invalid", "443", ""},
        {"http://127.0.0.1:8000/v1", "127.0.0.1", "8000", ""},
        {"http://[::1]:8000/v1", "::1", "8000", ""},
        {"ftp://prefetch-g.invalid/", "prefetch-g.invalid", "80", ""},
        {"https:///v1", "", "443", ""},
        {"", "", "443", ""},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rt_resolver_prefetch_url(cases[i][0]);
        if (rt_resolver_has(cases[i][1], cases[i][2]) != (cases[i][3][0] != '\0'))
            fail_msg("%s: %s:%s %s", cases[i][0], cases[i][1], cases[i][2],
                     cases[i][3][0] != '\0' ? "not queued" : "queued");
    }
}

/* A provider at an IPv6 address in brackets (rt_url_origin): both clients reach [::1] and
 * name it so in Host, and the built-in client carries it itself. */
static void test_ipv6_address(void **state)
{
    int f0 = begin("17 an IPv6 provider address");
    char *r200 = resp_cl(200, "OK", NULL, ok_body);
    struct srv_script sc = {.resp = {r200}, .then = SRV_KEEP};
    struct xfer *x[2];

    (void)state;
    srv_v6 = 1;
    for (int ci = 0; ci < 2; ci++) {
        struct rt_upstream_request req;
        struct srv *sv = srv_start(&sc);
        const struct srv_req *r;
        char url[128], host[64], v[256];

        assert_non_null(sv);
        x[ci] = xfer_new(&clients[ci]);
        url_of(url, sizeof(url), "[::1]", sv->port);
        req_init(&req, url);
        xfer_submit(x[ci], &req);
        xfer_wait(x[ci], WAIT_MS);
        expect("[::1]", x[ci], 0, 200, ok_body);
        r = srv_req_at(sv, 0);
        snprintf(host, sizeof(host), "[::1]:%u", (unsigned)sv->port);
        check(r != NULL && req_header(r, "Host", v, sizeof(v)) == 1 && strcmp(v, host) == 0,
              "%s [::1]: one Host header \"%s\" (got \"%s\")", clients[ci].name, host,
              r != NULL ? v : "no request");
        if (ci == 0)
            check(r != NULL && req_header(r, "Accept", NULL, 0) == 0,
                  "native [::1]: the built-in client carried it (no libcurl Accept header)");
        srv_stop(sv);
    }
    srv_v6 = 0;
    same("17 [::1]", x[0], x[1], 1);
    free(r200);
    assert_int_equal(n_failed, f0);
}

/* One reader of a provider URL's origin (rt_url_origin) for the resolver and the built-in
 * client: what it reads from each URL, and what it leaves to libcurl. */
static void test_url_origin(void **state)
{
    static const struct {
        const char *url;
        int ok;
        int tls;
        const char *hostport; /* the authority as written */
        const char *host;
        int literal;
        long port;
        const char *path;
    } cases[] = {
        {"http://a.example/v1", 1, 0, "a.example", "a.example", 0, 80, "/v1"},
        {"https://a.example:0443/v1?x", 1, 1, "a.example:0443", "a.example", 0, 443, "/v1?x"},
        {"https://a.example?x=1", 1, 1, "a.example", "a.example", 0, 443, "?x=1"},
        {"http://a_b.example:8080", 1, 0, "a_b.example:8080", "a_b.example", 0, 8080, ""},
        {"http://127.0.0.1:8000/v1", 1, 0, "127.0.0.1:8000", "127.0.0.1", 1, 8000, "/v1"},
        {"http://[::1]:8000/v1", 1, 0, "[::1]:8000", "::1", 1, 8000, "/v1"},
        {"https://[2001:db8::5]/v1", 1, 1, "[2001:db8::5]", "2001:db8::5", 1, 443, "/v1"},
        {"http://[::1]#f", 1, 0, "[::1]", "::1", 1, 80, "#f"},
        {"http://a.example:65535/", 1, 0, "a.example:65535", "a.example", 0, 65535, "/"},
        /* left to libcurl */
        {"http://a.example:65536/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example:0/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example:99999999999999999999/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example:+80/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example: 80/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example:80x/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example:/", 0, 0, "", "", 0, 0, ""},
        {"http://a.example:80:81/", 0, 0, "", "", 0, 0, ""},
        {"https://user:pw@a.example/v1", 0, 0, "", "", 0, 0, ""},
        {"https://a.example/v1@b", 1, 1, "a.example", "a.example", 0, 443, "/v1@b"},
        {"http://[::1/v1", 0, 0, "", "", 0, 0, ""},
        {"http://[::1]x/v1", 0, 0, "", "", 0, 0, ""},
        {"http://[]/v1", 0, 0, "", "", 0, 0, ""},
        {"http://[fe80::1%25eth0]/v1", 0, 0, "", "", 0, 0, ""},
        {"http://[a.example]/v1", 0, 0, "", "", 0, 0, ""},
        {"http://a]b.example/v1", 0, 0, "", "", 0, 0, ""},
        {"http://a b.example/v1", 0, 0, "", "", 0, 0, ""},
        {"http://a%2eexample/v1", 0, 0, "", "", 0, 0, ""},
        {"http:///v1", 0, 0, "", "", 0, 0, ""},
        {"http://", 0, 0, "", "", 0, 0, ""},
        {"HTTP://a.example/", 0, 0, "", "", 0, 0, ""},
        {"ftp://a.example/", 0, 0, "", "", 0, 0, ""},
        {"", 0, 0, "", "", 0, 0, ""},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rt_url_origin o;
        int ok = rt_url_origin(cases[i].url, &o) == 0;

        if (ok != cases[i].ok)
            fail_msg("%s: %s", cases[i].url, ok ? "read" : "declined");
        if (!ok)
            continue;
        if (o.tls != cases[i].tls || o.literal != cases[i].literal || o.port != cases[i].port ||
            o.hostport_len != strlen(cases[i].hostport) ||
            memcmp(o.hostport, cases[i].hostport, o.hostport_len) != 0 ||
            strcmp(o.host, cases[i].host) != 0 || strcmp(o.path, cases[i].path) != 0)
            fail_msg("%s: tls %d literal %d port %ld hostport '%.*s' host '%s' path '%s'",
                     cases[i].url, o.tls, o.literal, o.port, (int)o.hostport_len, o.hostport,
                     o.host, o.path);
        if (o.literal) {
            char a[INET6_ADDRSTRLEN];
            const void *ap = o.sa.ss_family == AF_INET6
                                 ? (const void *)&((struct sockaddr_in6 *)&o.sa)->sin6_addr
                                 : (const void *)&((struct sockaddr_in *)&o.sa)->sin_addr;
            unsigned port = ntohs(o.sa.ss_family == AF_INET6
                                      ? ((struct sockaddr_in6 *)&o.sa)->sin6_port
                                      : ((struct sockaddr_in *)&o.sa)->sin_port);

            if (inet_ntop(o.sa.ss_family, ap, a, sizeof(a)) == NULL || strcmp(a, o.host) != 0 ||
                port != (unsigned)o.port ||
                o.salen != (o.sa.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                       : sizeof(struct sockaddr_in)))
                fail_msg("%s: the address read is not %s port %ld", cases[i].url, o.host, o.port);
        }
        if (strtol(o.port_text, NULL, 10) != o.port)
            fail_msg("%s: port_text '%s' is not %ld", cases[i].url, o.port_text, o.port);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),  cmocka_unit_test(test_chunked_bytewise),
        cmocka_unit_test(test_close_delimited), cmocka_unit_test(test_interim_100),
        cmocka_unit_test(test_request_seen),    cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_no_reuse),        cmocka_unit_test(test_tls_resume),
        cmocka_unit_test(test_dead_keep_alive),
        cmocka_unit_test(test_fresh_closed),    cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_too_big),         cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_stream_pause),    cmocka_unit_test(test_stream_pause_last),
        cmocka_unit_test(test_stream_idle),     cmocka_unit_test(test_stream_first_byte),
        cmocka_unit_test(test_cancel),          cmocka_unit_test(test_drain),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_early_answer),    cmocka_unit_test(test_url_origin),
        cmocka_unit_test(test_ipv6_address),
        cmocka_unit_test(test_stream_error),    cmocka_unit_test(test_stats),
        cmocka_unit_test(test_prefetch_names),
    };
    int rc;

    /* the test talks to 127.0.0.1 only: a proxy from the environment would send libcurl
     * elsewhere and turn the built-in client off (upstream falls back to curl then) */
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    unsetenv("https_proxy");
    unsetenv("HTTPS_PROXY");
    signal(SIGPIPE, SIG_IGN); /* as router-svc: a write to a closed TLS peer is an error only */
    rc = cmocka_run_group_tests_name("upstream over http", tests, group_setup, group_teardown);
    if (tls_setup() != 0) {
        fprintf(stderr, "cannot make the TLS group's certificate\n");
        unlink(srv_ca_path);
        return 1;
    }
    tls_mode = 1;
    rc |= cmocka_run_group_tests_name("upstream over https", tests, group_setup, group_teardown);
    SSL_CTX_free(srv_tls);
    unlink(srv_ca_path);
    return rc;
}
