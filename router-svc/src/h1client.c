/* h1client: the built-in HTTP/1.1 client of the upstream module, for http:// and https://
 * providers: connections kept alive per origin (an address, or a host name the resolver thread
 * resolved; https: with TLS on the loop, h1tls.c), requests written and responses parsed (h1.h)
 * on the loop with the same callbacks and clock as libcurl's transfers. Loop thread, except
 * h1c_origin_of and h1c_submit (any submitter). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "resolver.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_str.h"
#include "tg_time.h"
#include "upstream_int.h"

static void h1_progress(struct rt_upstream *up, uint32_t idx);

/* Take c out of the list at *head (and *tail, for a list that keeps one). */
static void conn_unlink(struct h1conn **head, struct h1conn **tail, struct h1conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else if (tail != NULL)
        *tail = c->prev;
    c->prev = c->next = NULL;
}

static void idle_unlink(struct rt_upstream *up, struct h1conn *c)
{
    struct h1origin *o = &up->origins[c->origin];

    conn_unlink(&o->idle, NULL, c);
    o->n_idle--;
}

static void drain_unlink(struct rt_upstream *up, struct h1conn *c)
{
    conn_unlink(&up->drain_head, &up->drain_tail, c);
    c->draining = 0;
}

void h1c_conn_close(struct rt_upstream *up, struct h1conn *c, int reason)
{
    if (c->draining)
        drain_unlink(up, c);
    else if (!c->busy)
        idle_unlink(up, c);
    atomic_fetch_add(&up->st_conns_closed[reason], 1);
    h1t_conn_free(c);
    close(c->fd); /* leaves the epoll set with it */
    h1_reset(&c->rp);
    up->conns[c->id] = NULL;
    up->conn_free[up->conn_free_len++] = c->id;
    up->n_conns--;
    free(c);
}

/* Put a connection whose response ended cleanly in its origin's pool (closed when the pool is
 * full). */
static void conn_keep(struct rt_upstream *up, struct h1conn *c)
{
    struct h1origin *o = &up->origins[c->origin];

    if ((long)o->n_idle >= up->max_idle_per_origin) {
        h1c_conn_close(up, c, RT_UPC_POOL_FULL);
        return;
    }
    c->busy = 0;
    c->reused = 1;
    /* https: a response's end is not a drained socket; what else is there (a close) raises
     * the next event, or shows on the next transfer as a dead kept-alive connection */
    if (c->ssl != NULL)
        c->readable = 0;
    c->idle_since_us = tg_loop_mono_us();
    h1_reset(&c->rp);
    c->prev = NULL;
    c->next = o->idle;
    if (o->idle != NULL)
        o->idle->prev = c;
    o->idle = c;
    o->n_idle++;
}

/* Detach the transfer's connection: kept for the next request when the response ended cleanly
 * on a connection that stays open (reason H1_KEEP), closed for reason otherwise. */
void h1c_conn_release(struct rt_upstream *up, struct slot *s, int reason)
{
    struct h1conn *c = s->conn;

    if (c == NULL)
        return;
    s->conn = NULL;
    if (reason != H1_KEEP)
        h1c_conn_close(up, c, reason);
    else
        conn_keep(up, c);
}

/* Bytes of a draining connection's response: dropped. 1 when the connection left the draining
 * list (kept or closed), 0 to read on. */
static int drain_parse(struct rt_upstream *up, struct h1conn *c, const char *buf, size_t n)
{
    enum h1_drain d = h1_drain(&c->rp, buf, n);

    if (d == H1_DRAIN_MORE)
        return 0;
    /* kept only with nothing more to read (decrypted bytes after its end, or the peer
     * closing, end it too) */
    if (d == H1_DRAIN_KEEP && !h1t_pending(c) && !c->rdhup) {
        drain_unlink(up, c);
        atomic_fetch_add(&up->st_drained, 1);
        conn_keep(up, c);
        return 1;
    }
    h1c_conn_close(up, c, d == H1_DRAIN_BAD ? RT_UPC_FAILED : RT_UPC_NOT_REUSABLE);
    return 1;
}

/* Read a draining connection until the socket is drained or the response ended. */
static void drain_read(struct rt_upstream *up, struct h1conn *c)
{
    while (c->readable) {
        char why[CURL_ERROR_SIZE];
        ssize_t n = c->ssl != NULL
                        ? h1t_read(up, c, up->rbuf, H1_RECV_BYTES, why, sizeof(why))
                        : recv(c->fd, up->rbuf, H1_RECV_BYTES, 0);

        if (n > 0) {
            if ((size_t)n < H1_RECV_BYTES && !c->rdhup && c->ssl == NULL)
                c->readable = 0;
            if ((size_t)n > c->drain_left) {
                h1c_conn_close(up, c, RT_UPC_CANCELLED); /* too much left to read */
                return;
            }
            c->drain_left -= (size_t)n;
            if (drain_parse(up, c, up->rbuf, (size_t)n) != 0)
                return;
            continue;
        }
        if (n == -1 && errno == EINTR)
            continue;
        if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->readable = 0;
            return;
        }
        if (n == 0) {
            struct h1_event ev;

            /* the end of a close-delimited response, or a provider gone mid-response */
            h1c_conn_close(up, c,
                           h1_started(&c->rp) && h1_eof(&c->rp, &ev) == H1_DONE
                               ? RT_UPC_NOT_REUSABLE
                               : RT_UPC_FAILED);
            return;
        }
        h1c_conn_close(up, c, RT_UPC_FAILED);
        return;
    }
}

void h1c_conn_drain(struct rt_upstream *up, struct slot *s)
{
    struct h1conn *c = s->conn;

    if (c == NULL)
        return;
    /* a stream is closed: that is how a provider learns to stop generating */
    if (s->stream || s->paused || c->connecting || (c->ssl != NULL && !c->tls_ready) ||
        s->sent < s->head_len + s->body_len || c->rdhup ||
        (c->rp.status >= 200 && !c->rp.keep_alive)) {
        h1c_conn_release(up, s, RT_UPC_CANCELLED);
        return;
    }
    s->conn = NULL;
    c->draining = 1;
    c->drain_until_us = tg_loop_mono_us() + H1_DRAIN_MAX_US;
    c->drain_left = H1_DRAIN_MAX_BYTES;
    c->next = NULL;
    c->prev = up->drain_tail;
    if (up->drain_tail != NULL)
        up->drain_tail->next = c;
    else
        up->drain_head = c;
    up->drain_tail = c;
    if (c->readable)
        drain_read(up, c);
}

/* Close one idle connection of any origin to make room (the least recently used of the first
 * origin that has one), or else the oldest draining one. Returns 0 when none was either. */
static int conn_evict(struct rt_upstream *up)
{
    for (unsigned i = 0; i < up->n_origins; i++) {
        struct h1conn *c = up->origins[i].idle;

        if (c == NULL)
            continue;
        while (c->next != NULL)
            c = c->next;
        h1c_conn_close(up, c, RT_UPC_POOL_FULL);
        return 1;
    }
    if (up->drain_head != NULL) {
        h1c_conn_close(up, up->drain_head, RT_UPC_CANCELLED);
        return 1;
    }
    return 0;
}

/* A new connection to origin oi, connect() started. NULL with errbuf set on failure. */
static struct h1conn *conn_open(struct rt_upstream *up, uint32_t oi, char *errbuf, size_t cap)
{
    struct h1origin *o = &up->origins[oi];
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

    if (up->n_conns >= up->max_conns && !conn_evict(up)) {
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
    atomic_fetch_add(&up->st_conns_opened, 1);
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = H1_TAG | c->id;
    if (epoll_ctl(up->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        snprintf(errbuf, cap, "cannot watch a socket: %s", strerror(errno));
        c->busy = 1; /* not on an idle list */
        h1c_conn_close(up, c, RT_UPC_FAILED);
        return NULL;
    }
    if (o->tls && h1t_conn_setup(c, o, errbuf, cap) != 0) {
        c->busy = 1;
        h1c_conn_close(up, c, RT_UPC_FAILED);
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
    h1c_conn_release(up, s, RT_UPC_FAILED);
    up_slot_finish(up, idx, err == TG_ETIMEOUT ? CURLE_OPERATION_TIMEDOUT : CURLE_RECV_ERROR, 0);
}

/* A failure found where on_done must not run yet (inside submit): reported by the timer on the
 * loop's next turn. */
static void h1_fail_later(struct rt_upstream *up, uint32_t idx, int err)
{
    struct slot *s = &up->slots[idx];

    h1c_conn_release(up, s, RT_UPC_FAILED);
    s->fail_err = err;
    up_timer_arm(up, idx, 0);
}

/* Attach a connection to the transfer: the most recently used idle one of its origin, or a new
 * one (always new when fresh is set). 0, or -1 with errbuf set. */
static int h1_attach(struct rt_upstream *up, uint32_t idx, int fresh)
{
    struct slot *s = &up->slots[idx];
    struct h1origin *o = &up->origins[s->origin];
    struct h1conn *c = NULL;
    uint64_t now = tg_loop_mono_us();

    while (!fresh && o->idle != NULL) {
        c = o->idle;
        idle_unlink(up, c);
        c->busy = 1;
        if (now - c->idle_since_us <= H1_IDLE_MAX_US && !c->readable)
            break;
        /* too old, or the peer sent something (a close) while idle */
        h1c_conn_close(up, c, c->readable ? RT_UPC_PEER_CLOSED : RT_UPC_IDLE_EXPIRED);
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
static int h1_send(struct rt_upstream *up, struct slot *s)
{
    struct h1conn *c = s->conn;
    size_t total = s->head_len + s->body_len;

    if (c->ssl != NULL) {
        /* https: the head carries the body (h1c_submit), one record for a small request; not
         * before the handshake, which h1_progress drives */
        if (!c->tls_ready)
            return 0;
        while (s->sent < total && c->writable) {
            ssize_t n = h1t_write(up, c, s->head + s->sent, total - s->sent, s->errbuf,
                                  sizeof(s->errbuf));

            if (n < 0)
                return -1;
            s->sent += (size_t)n;
        }
        return 0;
    }
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
        h1c_conn_release(up, s, RT_UPC_PEER_CLOSED);
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
    if (up_resp_append(s, p, n) != 0)
        return -1;
    *took = n;
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
                if (up_slot_stash(s, ev.p + took, ev.n - took, buf, n) != 0) {
                    h1_fail(up, idx, TG_EIO, "out of memory");
                    return 1;
                }
                up_timer_arm(up, idx, up_slot_deadline(s, tg_loop_mono_us()));
                return 1;
            }
            h1_fail(up, idx, TG_EIO, s->errbuf);
            return 1;
        case H1_DONE:
            /* bytes after the response: the provider broke framing, do not reuse; nor when it
             * answered before taking the whole request */
            h1c_conn_release(up, s,
                             c->rp.keep_alive && n == 0 && !h1t_pending(c) && !c->rdhup &&
                                     s->sent == s->head_len + s->body_len
                                 ? H1_KEEP
                                 : RT_UPC_NOT_REUSABLE);
            up_slot_finish(up, idx, CURLE_OK, 0);
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
        char tls_why[CURL_ERROR_SIZE];
        ssize_t n = c->ssl != NULL ? h1t_read(up, c, up->rbuf, H1_RECV_BYTES, tls_why,
                                              sizeof(tls_why))
                                   : recv(c->fd, up->rbuf, H1_RECV_BYTES, 0);

        if (n > 0) {
            s->last_byte_us = tg_loop_mono_us(); /* a stream is idle only without any byte */
            if (s->ttfb_us == 0)
                s->ttfb_us = s->last_byte_us - s->start_us + 1;
            /* a short read drained the socket (edge-triggered: new bytes raise a new event),
             * unless the peer also closed: then read on to see the end. Not over TLS, which
             * reads record by record: there the read that waits says so. */
            if ((size_t)n < H1_RECV_BYTES && !c->rdhup && c->ssl == NULL)
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
                h1c_conn_release(up, s, RT_UPC_NOT_REUSABLE);
                up_slot_finish(up, idx, CURLE_OK, 0);
            } else {
                char why[160];

                snprintf(why, sizeof(why), "upstream %s", ev.err);
                h1_fail(up, idx, TG_EIO, why);
            }
            return;
        }
        if (errno == EINTR && n == -1)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->readable = 0;
            return;
        }
        {
            char why[CURL_ERROR_SIZE];

            if (n == -2)
                snprintf(why, sizeof(why), "%s", tls_why);
            else
                snprintf(why, sizeof(why), "receiving the response failed: %s",
                         strerror(errno));
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
    if (c->ssl != NULL && !c->tls_ready) {
        char why[CURL_ERROR_SIZE];
        int r = h1t_handshake(up, c, why, sizeof(why));

        if (r < 0) {
            h1_fail(up, idx, TG_EIO, why);
            return;
        }
        if (r == 0)
            return; /* the socket's next event goes on */
    }
    if (s->sent < s->head_len + s->body_len && h1_send(up, s) != 0) {
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
void h1c_event(struct rt_upstream *up, uint32_t id, uint32_t events)
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
    if (c->tls_write_wants_read && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        c->tls_write_wants_read = 0;
        c->writable = 1;
    }
    if (c->draining) {
        drain_read(up, c);
        return;
    }
    if (!c->busy) {
        /* an idle connection has nothing to say but a close (or garbage): drop it now; over
         * TLS it may also get records without data (a session ticket), which keep it */
        if (c->readable) {
            if (c->ssl != NULL && c->tls_ready && !c->rdhup && h1t_idle_ok(up, c)) {
                c->readable = 0;
                return;
            }
            h1c_conn_close(up, c, RT_UPC_PEER_CLOSED);
        }
        return;
    }
    h1_progress(up, c->slot);
}

/* Deliver what a pause kept, then read on. */
void h1c_unpause(struct rt_upstream *up, uint32_t idx)
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
    s->last_byte_us = tg_loop_mono_us();
    up_timer_arm(up, idx, up_slot_deadline(s, s->last_byte_us));
    r = ndec > 0 ? h1_body(s, b, ndec, &took) : 0;
    if (r > 0) {
        if (up_slot_stash(s, b + took, ndec - took, b + ndec, nraw) != 0)
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
void h1c_timers(struct rt_upstream *up)
{
    uint64_t now = tg_loop_mono_us();

    /* a drain not done within its time: closed, as the cancel would have */
    while (up->drain_head != NULL && up->drain_head->drain_until_us <= now)
        h1c_conn_close(up, up->drain_head, RT_UPC_CANCELLED);
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
        d = up_slot_deadline(s, now);
        if (d > now) {
            up_timer_arm(up, idx, d);
            continue;
        }
        if (!s->native) {
            up_slot_finish(up, idx, CURLE_OPERATION_TIMEDOUT, 0);
            continue;
        }
        h1_fail(up, idx, TG_ETIMEOUT, "upstream timed out");
    }
}

/* Origin index for an http:// or https:// URL, the path in *path; -1 when the URL is for curl
 * (rt_url_origin declines it: another scheme, credentials in the URL, a host that is neither an
 * address nor a DNS name; or a proxy for it in the environment, a name not resolved yet, a CA
 * bundle that cannot be loaded: curl says why), -2 when it is because the origin, name or TLS
 * context table is full (counted by the caller). Caller holds up->lock. */
int h1c_origin_of(struct rt_upstream *up, const struct rt_upstream_request *req,
                  const char **path)
{
    struct rt_url_origin u;
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    uint64_t now;
    int named = 0;
    SSL_CTX *ctx = NULL;
    int rc;

    if (rt_url_origin(req->url, &u) != 0 || !(u.tls ? up->native_tls : up->native))
        return -1;
    if (*u.path != '/')
        return -1; /* the router always builds an absolute path */
    *path = u.path;
    now = tg_loop_mono_us();
    if (u.tls) {
        int full;

        ctx = h1t_ctx(req->tls_no_verify, req->ca_file, &full);
        if (ctx == NULL)
            return full ? -2 : -1;
    }
    for (unsigned i = 0; i < up->n_origins; i++) {
        struct h1origin *o = &up->origins[i];

        if (strncmp(o->hostport, u.hostport, u.hostport_len) != 0 ||
            o->hostport[u.hostport_len] != '\0' || o->tls != u.tls || o->ctx != ctx)
            continue;
        if (o->named && now - o->checked_us > H1_DNS_CHECK_US) {
            /* a named origin follows its name: new connections go to the current address */
            o->checked_us = now;
            if (rt_resolver_lookup(u.host, u.port_text, &sa, &salen) > 0) {
                o->sa = sa;
                o->salen = salen;
            }
        }
        return (int)i;
    }
    if (u.literal) {
        sa = u.sa;
        salen = u.salen;
    } else {
        /* a host name: the resolver thread's answer, or curl until there is one */
        rc = rt_resolver_lookup(u.host, u.port_text, &sa, &salen);
        if (rc <= 0)
            return rc < 0 ? -2 : -1;
        named = 1;
    }
    if (up->n_origins >= H1_ORIGINS_MAX || u.hostport_len >= sizeof(up->origins[0].hostport)) {
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

        memcpy(o->hostport, u.hostport, u.hostport_len);
        o->hostport[u.hostport_len] = '\0';
        memcpy(o->host, u.host, strlen(u.host) + 1);
        o->tls = u.tls;
        o->ctx = ctx;
        o->sess = NULL;
        o->sa = sa;
        o->salen = salen;
        o->named = named;
        o->checked_us = now;
        o->idle = NULL;
        o->n_idle = 0;
    }
    return (int)up->n_origins++;
}

/* Appends n bytes at p to the head being built in b (len bytes so far; h1_prepare sized b). */
#define H1_PUT(b, len, p, n)                                                                   \
    do {                                                                                       \
        memcpy((b) + (len), (p), (n));                                                         \
        (len) += (n);                                                                          \
    } while (0)

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
    len = 0;
    H1_PUT(b, len, "POST ", 5);
    H1_PUT(b, len, path, strlen(path));
    H1_PUT(b, len, " HTTP/1.1\r\nHost: ", 17);
    H1_PUT(b, len, hostport, strlen(hostport));
    H1_PUT(b, len, "\r\n", 2);
    for (int i = 0; i < RT_UPSTREAM_HEADERS_MAX && req->headers[i] != NULL; i++) {
        size_t hl = strlen(req->headers[i]);

        memcpy(b + len, req->headers[i], hl);
        memcpy(b + len + hl, "\r\n", 2);
        len += hl + 2;
    }
    if (!up_has_content_type(req))
        H1_PUT(b, len, "Content-Type: application/json\r\n", 32);
    H1_PUT(b, len, "Content-Length: ", 16);
    len += tg_u64_dec(b + len, s->body_len);
    H1_PUT(b, len, "\r\n\r\n", 4);
    free(s->head);
    s->head = b;
    s->head_len = len;
    return 0;
}

/* Start a prepared native transfer. Loop thread. in_submit: on_done must not run now. */
void h1c_start(struct rt_upstream *up, uint32_t idx, int in_submit)
{
    struct slot *s = &up->slots[idx];

    s->state = SLOT_ACTIVE;
    if (h1_attach(up, idx, 0) != 0) {
        h1_fail_later(up, idx, TG_EIO);
        if (!in_submit)
            h1c_timers(up);
        return;
    }
    up_timer_arm(up, idx, up_slot_deadline(s, s->start_us));
    if (in_submit) {
        /* write now (no callback can run from a write); the answer comes through the loop */
        struct h1conn *c = s->conn;

        if (!c->connecting && h1_send(up, s) != 0) {
            snprintf(s->errbuf, sizeof(s->errbuf), "%s", "sending the request failed");
            if (c->reused && !s->retried) {
                /* a dead kept-alive connection: once more on a new one */
                s->retried = 1;
                h1c_conn_release(up, s, RT_UPC_PEER_CLOSED);
                if (h1_attach(up, idx, 1) == 0) {
                    if (!s->conn->connecting && h1_send(up, s) != 0)
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

/* submit for a native transfer: slot idx is taken (generation gen). */
int h1c_submit(struct rt_upstream *up, uint32_t idx, uint32_t gen, uint32_t oi, const char *path,
               const char *hostport, struct rt_upstream_request *req,
               const struct rt_upstream_ops *ops, void *ud, uint64_t *handle)
{
    struct slot *s = &up->slots[idx];

    up_slot_begin(s, req, ops, ud);
    s->body_len = s->req_body != NULL ? req->body_len : 0;
    if (h1_prepare(s, req, path, hostport) != 0) {
        up_slot_give_back(up, idx);
        return TG_ENOMEM;
    }
    if (up->origins[oi].tls && s->body_len > 0) {
        /* over TLS the request goes in one write (one record up to 16 KiB), not two */
        char *b = realloc(s->head, s->head_len + s->body_len);

        if (b == NULL) {
            up_slot_give_back(up, idx);
            return TG_ENOMEM;
        }
        memcpy(b + s->head_len, s->req_body, s->body_len);
        s->head = b;
        s->head_len += s->body_len;
        s->body_len = 0;
        free(s->req_body);
        s->req_body = NULL;
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
    *handle = up_handle_make(idx, gen);
    pthread_mutex_lock(&up->lock);
    s->submitted = 1;
    if (!up_on_owner_thread(up)) {
        up_cmd_post_locked(up, idx, CMD_SUBMIT);
        pthread_mutex_unlock(&up->lock);
        up_wake(up);
        return 0;
    }
    pthread_mutex_unlock(&up->lock);
    /* embedded, on the loop's own thread and outside it: connect and write now; every
     * callback comes from the loop's next turns */
    h1c_start(up, idx, 1);
    return 0;
}
