/* hsrv: router-svc's HTTP/1.1 server on a caller-owned epoll loop. See hsrv.h for the contract.
 *
 * Costs per request on a kept-alive connection, in the common case where the request arrives in
 * one read and the response leaves in one write: one recv (a short read means the socket is
 * empty: no second recv for EAGAIN), one sendmsg (status line, headers and body together), one
 * allocation for the request head and one for the response. No epoll_ctl: a connection is
 * registered once, edge-triggered, for reading, writing and the peer's shutdown. Suspending and
 * resuming a request are flag and list operations. */
#include "hsrv.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "hparse.h"
#include "hsrv_int.h"
#include "tg_blocks.h"
#include "tg_log.h"
#include "tg_str.h"
#include "tg_time.h"

static void conn_close(struct hs_conn *c, enum hs_toe toe);
static void conn_read(struct hs_conn *c);
static void conn_flush(struct hs_conn *c);
static void start_send(struct hs_conn *c);

/* ------------------------------------------------------------------ small helpers */

/* One writer: a relaxed load and store (plain moves), no locked instruction. */
#define ST_ADD(s, f, d)                                                                            \
    atomic_store_explicit(&(s)->f, atomic_load_explicit(&(s)->f, memory_order_relaxed) + (d),      \
                          memory_order_relaxed)

static int on_loop(const struct hs_server *s)
{
    return s->have_tid && pthread_equal(pthread_self(), s->loop_tid);
}

static void note_loop(struct hs_server *s)
{
    if (!s->have_tid) {
        s->loop_tid = pthread_self();
        s->have_tid = 1;
    }
}

/* "Date: ...\r\n", formatted once a second. */
static const char *date_line(struct hs_server *s, size_t *len)
{
    time_t now = time(NULL);

    if (now != s->date_t) {
        struct tm tm;

        gmtime_r(&now, &tm);
        s->date_len =
            strftime(s->date, sizeof(s->date), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        s->date_t = now;
    }
    *len = s->date_len;
    return s->date;
}

/* ------------------------------------------------------------------ responses */

/* ------------------------------------------------------------------ request accessors */

void hs_suspend(struct hs_conn *c)
{
    c->suspended = 1;
}

static void resumed_push(struct hs_server *s, struct hs_conn *c)
{
    if (c->in_r)
        return;
    c->in_r = 1;
    c->rnext = NULL;
    if (s->rtail != NULL)
        s->rtail->rnext = c;
    else
        s->rhead = c;
    s->rtail = c;
}

void hs_resume(struct hs_conn *c)
{
    struct hs_server *s = c->s;

    if (on_loop(s)) {
        if (!c->suspended || c->state == CS_CLOSED)
            return;
        c->suspended = 0;
        resumed_push(s, c);
        return;
    }
    pthread_mutex_lock(&s->xmu);
    if (!c->in_x) {
        c->in_x = 1;
        c->xnext = s->xhead;
        s->xhead = c;
    }
    pthread_mutex_unlock(&s->xmu);
    if (s->cfg.wake != NULL)
        s->cfg.wake(s->cfg.wake_cls);
}

/* ------------------------------------------------------------------ connection life */

static void request_reset(struct hs_conn *c)
{
    hs_head_release(c);
    c->kv = NULL;
    c->nh = c->na = 0;
    c->head_bytes = 0;
    c->method = c->url = NULL;
    c->minor = 1;
    c->keep_alive = 0;
    c->is_head = 0;
    c->req_ctx = NULL;
    c->handler_live = 0;
    c->suspended = 0;
    c->chunked = 0;
    c->body_left = 0;
    c->body_got = 0;
    c->head_started = 0;
    hp_scan_reset(&c->scan);
    c->early = 0;
    c->close_after = 0;
    c->stream_end = 0;
    c->body_off = 0;
    c->resp_status = 0;
    hs_response_free(c->resp);
    c->resp = NULL;
    if (!c->obuf_borrowed)
        free(c->obuf);
    c->obuf = NULL;
    c->obuf_borrowed = 0;
    c->olen = c->ooff = 0;
}

static void completed(struct hs_conn *c, enum hs_toe toe)
{
    struct hs_server *s = c->s;

    if (!c->handler_live)
        return;
    c->handler_live = 0;
    if (s->cfg.completed != NULL)
        s->cfg.completed(s->cfg.completed_cls, c, &c->req_ctx, toe);
}

static void conn_close(struct hs_conn *c, enum hs_toe toe)
{
    struct hs_server *s = c->s;

    if (c->state == CS_CLOSED)
        return;
    completed(c, toe);
    request_reset(c); /* a stream's free function runs after completed, as with MHD */
    free(c->rbuf);
    c->rbuf = NULL;
    c->rlen = 0;
    close(c->fd); /* leaves the epoll set with it */
    c->fd = -1;
    c->state = CS_CLOSED;
    if (s->sweep_at == c)
        s->sweep_at = c->next; /* a stopped sweep goes on from the next one */
    if (c->ip_held) {
        hs_ipcap_release(s->cfg.ipcap, c->peer);
        c->ip_held = 0;
    }
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    /* in_x is another thread's to set: read under the lock (once per close) */
    pthread_mutex_lock(&s->xmu);
    if (c->in_x) {
        for (struct hs_conn **pp = &s->xhead; *pp != NULL; pp = &(*pp)->xnext) {
            if (*pp == c) {
                *pp = c->xnext;
                break;
            }
        }
        c->in_x = 0;
    }
    pthread_mutex_unlock(&s->xmu);
    /* it may stay on the resumed list (skipped there as closed); freed at the end of the turn,
     * since events of this turn may still name it */
    c->gnext = s->graveyard;
    s->graveyard = c;
    ST_ADD(s, st_open, (uint64_t)-1);
}

/* The error code of the server's own answers, by status. */
static const char *own_code(int status)
{
    switch (status) {
    case 431:
        return "request_header_fields_too_large";
    case 501:
        return "unsupported_transfer_coding";
    case 503:
        return "service_unavailable";
    case 505:
        return "http_version_not_supported";
    default:
        return "bad_request";
    }
}

/* The server's own answer to a request it cannot take (400, 431, 501, 503, 505): JSON in the
 * OpenAI error shape, then close. A request whose handler already ran ends with HS_TOE_ERROR. */
static void answer_own(struct hs_conn *c, int status, const char *message)
{
    char *body = malloc(512);
    struct hs_response *r;
    const char *code = own_code(status);
    int n;

    ST_ADD(c->s, st_bad, 1);
    completed(c, HS_TOE_ERROR);
    c->keep_alive = 0;
    if (body == NULL) {
        conn_close(c, HS_TOE_ERROR);
        return;
    }
    n = snprintf(body, 512,
                 "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\","
                 "\"param\":null,\"code\":\"%s\"}}",
                 message, code);
    r = hs_response_buffer(body, (size_t)n);
    if (r == NULL) {
        conn_close(c, HS_TOE_ERROR);
        return;
    }
    HS_RESPONSE_HEADER(r, "Content-Type", "application/json");
    hs_response_free(c->resp);
    c->resp = r;
    c->resp_status = status;
    c->early = 1; /* whatever the client still sends is dropped before the close */
    c->close_after = 1;
    c->is_head = 0;
    start_send(c);
}

/* ------------------------------------------------------------------ parsing the head */

/* The server's answer to a connection it will not serve (over a cap, out of time): one
 * non-blocking write of a small JSON error in the OpenAI shape, then the close. What the client
 * already sent is read first (one recv), so that the close does not reset the connection under
 * the answer when the request is already there. */
static void refuse_fd(struct hs_server *s, int fd, int minor, int status, const char *code,
                      const char *message)
{
    char *o = s->ohead;
    char body[256];
    int bl =
        snprintf(body, sizeof(body),
                 "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,"
                 "\"code\":\"%s\"}}",
                 message, status == 503 ? "service_unavailable" : "invalid_request_error", code);
    int n;

    if (bl < 0 || (size_t)bl >= sizeof(body))
        bl = 0;
    (void)recv(fd, s->scratch, sizeof(s->scratch), MSG_DONTWAIT);
    n = snprintf(o, sizeof(s->ohead),
                 "HTTP/1.%d %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 "%sConnection: close\r\n\r\n%.*s",
                 minor == 0 ? 0 : 1, status, hs_reason(status), bl,
                 status == 503 ? "Retry-After: 1\r\n" : "", bl, body);
    if (n > 0 && (size_t)n < sizeof(s->ohead))
        (void)send(fd, o, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
}

/* ------------------------------------------------------------------ sending */

static int status_has_body(int status)
{
    return !(status < 200 || status == 204 || status == 304);
}

/* Unsent bytes that point into the server's scratch are copied before the call returns: the
 * head into its response's header room (the extra headers are in it, so it is free), which it
 * fits unless the headers filled it; a stream's piece, or such a head, into a buffer of its own. */
static int own_pending(struct hs_conn *c)
{
    size_t left = c->olen - c->ooff;
    char *copy;

    if (c->obuf_borrowed != HS_OBUF_SCRATCH)
        return 0; /* ours, or in the header room already */
    if (c->obuf == c->s->ohead && c->resp != NULL && left <= sizeof(c->resp->hdr)) {
        memcpy(c->resp->hdr, c->obuf + c->ooff, left);
        c->obuf = c->resp->hdr;
        c->olen = left;
        c->ooff = 0;
        c->obuf_borrowed = HS_OBUF_RESP; /* freed with the response */
        return 0;
    }
    copy = malloc(left);
    if (copy == NULL)
        return -1;
    memcpy(copy, c->obuf + c->ooff, c->olen - c->ooff);
    c->obuf = copy;
    c->olen -= c->ooff;
    c->ooff = 0;
    c->obuf_borrowed = 0;
    return 0;
}

/* The response is out: completed, then the next request, or the close. */
static void response_done(struct hs_conn *c)
{
    struct hs_server *s = c->s;
    int close_it = c->close_after || s->quiesced; /* quiesced while the response went out */
    int early = c->early;

    completed(c, HS_TOE_OK);
    request_reset(c);
    if (close_it) {
        if (early) {
            /* the client may still be sending the body it was answered for: closing with
             * unread bytes would reset the connection and could destroy the answer on its way,
             * so stop writing and drop what comes, for a bounded time */
            shutdown(c->fd, SHUT_WR);
            c->pending_parse = 0;
            c->state = CS_LINGER;
            c->linger_start_ms = c->last_ms = tg_loop_mono_ms();
            c->linger_bytes = 0;
            if (!c->in_process) {
                /* (within process(), rbuf is its buffer: the caller drops it) */
                free(c->rbuf);
                c->rbuf = NULL;
                c->rlen = 0;
                conn_read(c);
            }
        } else {
            conn_close(c, HS_TOE_OK);
        }
        return;
    }
    c->state = CS_HEAD;
    c->last_ms = tg_loop_mono_ms();
    if (c->in_process)
        return; /* process() goes on with the bytes it holds */
    if (c->rlen > 0)
        c->pending_parse = 1;
    if (c->rlen > 0 || c->maybe_more)
        resumed_push(s, c);
}

/* Write what is pending, asking the reader for more, until the socket is full, the reader has
 * nothing, or the response is out. */
static void conn_flush(struct hs_conn *c)
{
    struct hs_server *s = c->s;

    if (c->held)
        return; /* hs_server_release sends it */
    for (;;) {
        struct iovec iov[2];
        struct msghdr mh;
        size_t want = 0;
        int k = 0;
        ssize_t n;

        /* checked before every send: the reader below may have completed the request, whose
         * event must be in the spool before these bytes leave */
        if (c->hold) {
            if (own_pending(c) != 0) {
                conn_close(c, HS_TOE_ERROR);
                return;
            }
            c->held = 1;
            c->hnext = NULL;
            if (s->htail != NULL)
                s->htail->hnext = c;
            else
                s->hhead = c;
            s->htail = c;
            return;
        }

        if (c->ooff < c->olen) {
            iov[k].iov_base = c->obuf + c->ooff;
            iov[k].iov_len = c->olen - c->ooff;
            want += iov[k++].iov_len;
        }
        if (c->resp != NULL && c->body_off < c->resp->body_len) {
            iov[k].iov_base = c->resp->body + c->body_off;
            iov[k].iov_len = c->resp->body_len - c->body_off;
            want += iov[k++].iov_len;
        }
        if (k > 0) {
            memset(&mh, 0, sizeof(mh));
            mh.msg_iov = iov;
            mh.msg_iovlen = (size_t)k;
            n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if (own_pending(c) != 0)
                        conn_close(c, HS_TOE_ERROR);
                    return; /* EPOLLOUT resumes */
                }
                conn_close(c, (errno == EPIPE || errno == ECONNRESET) ? HS_TOE_CLIENT_GONE
                                                                      : HS_TOE_ERROR);
                return;
            }
            c->last_ms = tg_loop_mono_ms();
            {
                size_t m = (size_t)n;
                size_t head_left = c->olen - c->ooff;

                if (m >= head_left) {
                    m -= head_left;
                    c->ooff = c->olen;
                    c->body_off += m;
                } else {
                    c->ooff += m;
                }
            }
            if ((size_t)n < want) {
                /* the socket is full: its next EPOLLOUT edge resumes */
                if (own_pending(c) != 0)
                    conn_close(c, HS_TOE_ERROR);
                return;
            }
            continue;
        }
        /* everything handed to the kernel so far */
        if (!c->obuf_borrowed)
            free(c->obuf);
        c->obuf = NULL;
        c->obuf_borrowed = 0;
        c->olen = c->ooff = 0;
        if (!c->stream_end) {
            struct hs_response *r = c->resp;
            int chunked = c->minor >= 1;
            char *p = s->piece + HS_CHUNK_PREFIX;
            ssize_t got;

            if (c->suspended)
                return;
            got = r->reader(r->rcls, p, HS_STREAM_PIECE_BYTES);
            if (c->state == CS_CLOSED)
                return;
            if (got == 0) {
                c->suspended = 1; /* hs_resume calls the reader again */
                return;
            }
            if (got == HS_READER_END) {
                size_t o = 0;

                if (chunked) {
                    memcpy(s->piece, "0\r\n", 3);
                    o = 3;
                    memcpy(s->piece + o, r->trl, r->tlen);
                    o += r->tlen;
                    memcpy(s->piece + o, "\r\n", 2);
                    o += 2;
                }
                c->stream_end = 1;
                c->obuf = s->piece;
                c->obuf_borrowed = HS_OBUF_SCRATCH;
                c->ooff = 0;
                c->olen = o;
                continue;
            }
            if (got < 0 || (size_t)got > HS_STREAM_PIECE_BYTES) {
                conn_close(c, HS_TOE_ERROR);
                return;
            }
            if (chunked) {
                char hex[HS_CHUNK_PREFIX];
                int hl = snprintf(hex, sizeof(hex), "%zx\r\n", (size_t)got);

                memcpy(p - hl, hex, (size_t)hl);
                memcpy(p + got, "\r\n", 2);
                c->obuf = p - hl;
                c->olen = (size_t)hl + (size_t)got + 2;
            } else {
                c->obuf = p;
                c->olen = (size_t)got;
            }
            c->obuf_borrowed = HS_OBUF_SCRATCH;
            c->ooff = 0;
            continue;
        }
        response_done(c);
        return;
    }
}

/* Build the head of c->resp (status line, Date, the response's headers, framing, Connection)
 * and start writing it with the body. */
static void start_send(struct hs_conn *c)
{
    struct hs_server *s = c->s;
    struct hs_response *r = c->resp;
    char *o = s->ohead;
    size_t n, dl;
    const char *date = date_line(s, &dl);
    int status = c->resp_status;
    int body = status_has_body(status);
    int stream = r->reader != NULL;

    c->close_after = c->close_after || r->close || !c->keep_alive || c->early || s->quiesced ||
                     (stream && body && !c->is_head && c->minor == 0);
    {
        /* "HTTP/1.x NNN Reason\r\n", at most 64 bytes as before */
        const char *reason = hs_reason(status);
        size_t rl = strnlen(reason, 64 - 17);

        memcpy(o, c->minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
        n = 9 + tg_u64_dec(o + 9, (uint64_t)(status < 0 ? 0 : status > 999 ? 999 : status));
        o[n++] = ' ';
        memcpy(o + n, reason, rl);
        n += rl;
        memcpy(o + n, "\r\n", 2);
        n += 2;
    }
    memcpy(o + n, date, dl);
    n += dl;
    memcpy(o + n, r->hdr, r->hlen);
    n += r->hlen;
    if (stream) {
        if (c->minor >= 1 && body) {
            memcpy(o + n, "Transfer-Encoding: chunked\r\n", 28);
            n += 28;
        }
    } else if (body) {
        memcpy(o + n, "Content-Length: ", 16);
        n += 16;
        n += tg_u64_dec(o + n, r->body_len);
        memcpy(o + n, "\r\n", 2);
        n += 2;
    }
    if (c->close_after) {
        memcpy(o + n, "Connection: close\r\n\r\n", 21);
        n += 21;
    } else if (c->minor == 0) {
        memcpy(o + n, "Connection: keep-alive\r\n\r\n", 26);
        n += 26;
    } else {
        memcpy(o + n, "\r\n", 2);
        n += 2;
    }
    if (!body || c->is_head) {
        /* headers only: a stream's reader is not asked */
        if (stream && r->rfree != NULL)
            r->rfree(r->rcls);
        r->reader = NULL;
        r->rfree = NULL;
        hs_response_body_free(r);
        r->body_len = 0;
        stream = 0;
    }
    c->state = CS_SEND;
    c->suspended = 0;
    c->stream_end = !stream;
    c->body_off = 0;
    c->obuf = o;
    c->obuf_borrowed = HS_OBUF_SCRATCH;
    c->olen = n;
    c->ooff = 0;
    conn_flush(c);
}

int hs_respond(struct hs_conn *c, int status, struct hs_response *r)
{
    if (c->resp != NULL || c->state == CS_CLOSED || c->state == CS_SEND || c->state == CS_LINGER) {
        hs_response_free(r);
        c->close_after = 1;
        return HS_NO;
    }
    c->resp = r;
    c->resp_status = status;
    /* body not read whole: the rest is dropped and the connection closes after the answer */
    c->early = c->state == CS_HEAD || (c->state == CS_BODY && (c->chunked || c->body_left > 0));
    return HS_YES;
}

/* ------------------------------------------------------------------ the request path */

/* After a handler call: close on HS_NO, send a queued response, or, for a complete request
 * neither answered nor suspended, call the handler again on the next run (as MHD does). */
static void after_handler(struct hs_conn *c, int rc)
{
    if (c->state == CS_CLOSED)
        return;
    if (rc != HS_YES) {
        conn_close(c, HS_TOE_ERROR);
        return;
    }
    if (c->resp != NULL && c->state != CS_SEND) {
        start_send(c);
        return;
    }
    if (c->state == CS_WAIT && !c->suspended)
        resumed_push(c->s, c);
}

static void call_final(struct hs_conn *c)
{
    struct hs_server *s = c->s;
    size_t zero = 0;
    int rc = s->cfg.handler(s->cfg.handler_cls, c, c->url, c->method,
                            c->minor == 0 ? "HTTP/1.0" : "HTTP/1.1", NULL, &zero, &c->req_ctx);

    after_handler(c, rc);
}

static void deliver(struct hs_conn *c, const char *p, size_t n)
{
    struct hs_server *s = c->s;
    size_t sz = n;
    int rc;

    if (n == 0)
        return;
    c->body_got += n;
    rc = s->cfg.handler(s->cfg.handler_cls, c, c->url, c->method,
                        c->minor == 0 ? "HTTP/1.0" : "HTTP/1.1", p, &sz, &c->req_ctx);
    after_handler(c, rc);
}

static void body_complete(struct hs_conn *c)
{
    c->state = CS_WAIT;
    call_final(c);
}

/* Chunked body bytes: deliver data, walk the framing. Returns bytes used; stops early when the
 * state changes (answered, closed, complete, suspended). */
static size_t chunked_feed(struct hs_conn *c, const char *buf, size_t len)
{
    size_t off = 0;

    while (off < len && c->state == CS_BODY && c->resp == NULL && !c->suspended) {
        const char *data = NULL;
        const char *msg = "malformed chunked body";
        size_t used = 0, dlen = 0;
        int status = 400;
        int r = hp_chunked_feed(&c->ch, buf + off, len - off, &used, &data, &dlen, &status, &msg);

        off += used;
        if (r < 0) {
            answer_own(c, status, msg);
            return len;
        }
        if (r == HP_CH_DATA) {
            deliver(c, data, dlen);
            continue;
        }
        if (r == HP_CH_DONE) {
            body_complete(c);
            return off;
        }
        break; /* HP_CH_MORE: everything was used */
    }
    return off;
}

/* Parse and act on buffered bytes. Returns how many were used; the rest waits (a partial head
 * or chunk line, or a pipelined request while this one is answered). */
static size_t process(struct hs_conn *c, const char *buf, size_t len)
{
    struct hs_server *s = c->s;
    size_t off = 0;

    c->in_process = 1;
    while ((c->state == CS_HEAD || c->state == CS_BODY) && !c->suspended) {
        if (c->state == CS_HEAD) {
            size_t hs = 0, he = 0;
            const char *msg = "malformed request";
            int st;
            size_t zero = 0;
            int rc;

            if (off == len)
                break;
            st = hp_head_scan(&c->scan, buf + off, len - off, s->head_max, &hs, &he, &msg);
            if (st == HP_SCAN_MORE) {
                if (c->scan.prefix) {
                    /* only empty lines so far (allowed before a request line): dropped, and the
                     * connection is still between requests */
                    off = len;
                    hp_scan_reset(&c->scan);
                    break;
                }
                if (c->scan.start > 0) {
                    /* the empty lines before the request line are dropped as soon as they are
                     * seen: what the head may take does not depend on how the bytes came */
                    off += c->scan.start;
                    c->scan.off -= c->scan.start;
                    c->scan.start = 0;
                }
                if (c->scan.lead)
                    break; /* (a CR waits for its LF: no request yet) */
                if (!c->head_started) {
                    c->head_started = 1;
                    c->head_start_ms = tg_loop_mono_ms();
                }
                break;
            }
            if (st != HP_SCAN_DONE) {
                answer_own(c, st == HP_SCAN_LARGE ? 431 : 400, msg);
                off = len;
                break;
            }
            st = hs_head_take(c, buf + off + hs, he - hs, &msg);
            off += he;
            hp_scan_reset(&c->scan);
            c->head_started = 0;
            c->nreq++;
            if (st != 0) {
                answer_own(c, st, msg);
                off = len;
                break;
            }
            ST_ADD(s, st_requests, 1);
            c->state = CS_BODY;
            c->body_start_ms = tg_loop_mono_ms();
            c->handler_live = 1;
            rc = s->cfg.handler(s->cfg.handler_cls, c, c->url, c->method,
                                c->minor == 0 ? "HTTP/1.0" : "HTTP/1.1", NULL, &zero, &c->req_ctx);
            after_handler(c, rc);
            if (c->state != CS_BODY || c->suspended)
                continue; /* (suspended: hs_resume goes on with the body) */
            if (!c->chunked && c->body_left == 0) {
                body_complete(c);
                continue;
            }
            if (off == len && c->minor >= 1) {
                /* the handler took the request from its headers: the client may send the body */
                const char *ex = hs_header(c, "Expect");

                if (ex != NULL && strcasecmp(ex, "100-continue") == 0) {
                    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

                    if (send(c->fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) !=
                        (ssize_t)(sizeof(cont) - 1)) {
                        conn_close(c, HS_TOE_ERROR);
                        break;
                    }
                }
            }
            continue;
        }
        /* CS_BODY */
        if (off == len)
            break;
        if (c->chunked) {
            off += chunked_feed(c, buf + off, len - off);
        } else {
            size_t take = len - off;

            if (take > c->body_left)
                take = (size_t)c->body_left;
            c->body_left -= take;
            deliver(c, buf + off, take);
            off += take;
            if (c->state == CS_BODY && c->resp == NULL && c->body_left == 0)
                body_complete(c);
        }
    }
    if (c->state == CS_LINGER || c->state == CS_CLOSED)
        off = len;
    c->in_process = 0;
    return off;
}

/* Keep the unused tail of buf (the scratch or rbuf) in rbuf, sized to what it holds (the
 * smallest power of two from HS_RBUF_MIN_BYTES). Returns -1 when out of memory. */
static int keep_tail(struct hs_conn *c, const char *buf, size_t total, size_t used)
{
    size_t left = total - used;
    size_t cap = HS_RBUF_MIN_BYTES;

    if (buf == c->rbuf) {
        if (left == 0) {
            free(c->rbuf);
            c->rbuf = NULL;
            c->rcap = 0;
        } else if (used > 0) {
            memmove(c->rbuf, c->rbuf + used, left);
        }
        c->rlen = left;
        return 0;
    }
    if (left == 0)
        return 0;
    while (cap < left)
        cap *= 2;
    if (cap > c->s->rbuf_cap)
        cap = c->s->rbuf_cap; /* (left <= the scratch <= rbuf_cap) */
    c->rbuf = malloc(cap);
    if (c->rbuf == NULL)
        return -1;
    memcpy(c->rbuf, buf + used, left);
    c->rlen = left;
    c->rcap = cap;
    return 0;
}

static void conn_read(struct hs_conn *c)
{
    struct hs_server *s = c->s;

    if (c->pending_parse && c->rbuf != NULL) {
        size_t used;

        c->pending_parse = 0;
        used = process(c, c->rbuf, c->rlen);
        if (c->state == CS_CLOSED)
            return;
        if (c->state == CS_LINGER) {
            free(c->rbuf);
            c->rbuf = NULL;
            c->rlen = 0;
        } else {
            keep_tail(c, c->rbuf, c->rlen, used); /* within rbuf: no allocation */
        }
    }
    for (;;) {
        char *buf;
        size_t have, cap, used;
        ssize_t n;

        if (c->state == CS_LINGER) {
            n = recv(c->fd, s->scratch, sizeof(s->scratch), 0);
            if (n > 0) {
                c->last_ms = tg_loop_mono_ms();
                c->linger_bytes += (uint64_t)n;
                if (c->linger_bytes > s->linger_max) {
                    ST_ADD(s, st_linger_cut, 1);
                    conn_close(c, HS_TOE_OK); /* dropped enough: the client is not done */
                    return;
                }
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            conn_close(c, HS_TOE_OK); /* the client is done (or gone) */
            return;
        }
        if (c->state != CS_HEAD && c->state != CS_BODY)
            return; /* a request is being answered: the rest waits */
        if (c->suspended) {
            c->maybe_more = 1; /* read after hs_resume */
            return;
        }
        if (c->rbuf != NULL) {
            if (c->rlen == c->rcap && c->rcap < s->rbuf_cap) {
                size_t ncap = c->rcap * 2 < s->rbuf_cap ? c->rcap * 2 : s->rbuf_cap;
                char *nb = realloc(c->rbuf, ncap);

                if (nb == NULL) {
                    conn_close(c, HS_TOE_ERROR);
                    return;
                }
                c->rbuf = nb;
                c->rcap = ncap;
            }
            buf = c->rbuf;
            have = c->rlen;
            cap = c->rcap;
        } else {
            buf = s->scratch;
            have = 0;
            cap = sizeof(s->scratch);
        }
        if (have == cap) {
            answer_own(c, 431, "request headers too large");
            return;
        }
        n = recv(c->fd, buf + have, cap - have, 0);
        if (n == 0) {
            /* the client closed: between requests a normal end; within one, it is gone */
            conn_close(c, HS_TOE_CLIENT_GONE);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->maybe_more = 0;
                return;
            }
            conn_close(c, HS_TOE_CLIENT_GONE);
            return;
        }
        c->maybe_more = (size_t)n == cap - have;
        c->last_ms = tg_loop_mono_ms();
        used = process(c, buf, have + (size_t)n);
        if (c->state == CS_CLOSED)
            return;
        if (c->state == CS_LINGER) {
            if (buf == c->rbuf) {
                free(c->rbuf);
                c->rbuf = NULL;
                c->rlen = 0;
            }
            continue; /* drop what remains */
        }
        if (keep_tail(c, buf, have + (size_t)n, used) != 0) {
            conn_close(c, HS_TOE_ERROR);
            return;
        }
        if (c->suspended)
            return; /* the handler suspended the request while its body arrives */
        if (!c->maybe_more && (c->state == CS_HEAD || c->state == CS_BODY))
            return; /* a short read: the socket is empty, the next edge brings more */
        if (c->state != CS_HEAD && c->state != CS_BODY)
            return;
    }
}

/* ------------------------------------------------------------------ server */

static void accept_all(struct hs_server *s)
{
    s->accept_more = 0;
    for (unsigned taken = 0;; taken++) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        struct hs_conn *c;
        struct epoll_event ev;
        int one = 1;
        uint32_t addr;
        int fd;

        if (taken >= HS_ACCEPT_PER_TURN) {
            /* the rest on the next turn (edge-triggered: no new event would say so) */
            s->accept_more = 1;
            return;
        }
        fd = accept4(s->lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                TG_WARN_RL("msg=http_accept_failed err=%d", errno);
            return;
        }
        addr = plen >= sizeof(peer) && peer.sin_family == AF_INET ? peer.sin_addr.s_addr : 0;
        if (atomic_load_explicit(&s->st_open, memory_order_relaxed) >= s->cfg.max_connections) {
            refuse_fd(s, fd, 1, 503, "too_many_connections",
                      "router is at its connection limit (max_connections)");
            close(fd);
            ST_ADD(s, st_refused, 1);
            continue;
        }
        if (s->cfg.ipcap != NULL && hs_ipcap_acquire(s->cfg.ipcap, addr) != 0) {
            refuse_fd(s, fd, 1, 503, "too_many_connections_from_address",
                      "too many connections from this address (max_connections_per_ip)");
            close(fd);
            ST_ADD(s, st_refused_ip, 1);
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            if (s->cfg.ipcap != NULL)
                hs_ipcap_release(s->cfg.ipcap, addr);
            close(fd);
            ST_ADD(s, st_refused, 1);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->kind = HS_KIND_CONN;
        c->fd = fd;
        c->s = s;
        c->state = CS_HEAD;
        c->minor = 1;
        c->peer = addr;
        c->ip_held = s->cfg.ipcap != NULL;
        hp_scan_reset(&c->scan);
        c->accept_ms = c->last_ms = tg_loop_mono_ms();
        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
        ev.data.ptr = c;
        if (epoll_ctl(s->cfg.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            if (c->ip_held)
                hs_ipcap_release(s->cfg.ipcap, addr);
            close(fd);
            free(c);
            ST_ADD(s, st_refused, 1);
            continue;
        }
        c->next = s->conns;
        if (s->conns != NULL)
            s->conns->prev = c;
        s->conns = c;
        ST_ADD(s, st_open, 1);
        ST_ADD(s, st_accepted, 1);
    }
}

struct hs_server *hs_event_server(const struct epoll_event *ev)
{
    int kind = *(const int *)ev->data.ptr;

    if (kind == HS_KIND_LISTEN)
        return ev->data.ptr;
    return ((struct hs_conn *)ev->data.ptr)->s;
}

void hs_server_event(struct hs_server *s, const struct epoll_event *ev)
{
    int kind = *(const int *)ev->data.ptr;
    struct hs_conn *c;
    uint32_t e = ev->events;

    note_loop(s);
    if (kind == HS_KIND_LISTEN) {
        if (s->lfd >= 0)
            accept_all(s);
        return;
    }
    c = ev->data.ptr;
    switch (c->state) {
    case CS_HEAD:
    case CS_BODY:
    case CS_LINGER:
        if (c->suspended && (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
            conn_close(c, HS_TOE_CLIENT_GONE); /* suspended while its body arrives */
            return;
        }
        conn_read(c);
        break;
    case CS_WAIT:
    case CS_SEND:
        if (e & EPOLLIN)
            c->maybe_more = 1;
        if ((e & EPOLLOUT) && c->state == CS_SEND && !c->suspended)
            conn_flush(c);
        break;
    default:
        return;
    }
    /* the client closed or reset while its request waits or is answered: it is gone (as nginx
     * takes it: a half-closed request is not answered either) */
    if ((e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && (c->state == CS_WAIT || c->state == CS_SEND))
        conn_close(c, HS_TOE_CLIENT_GONE);
}

/* A deadline passed while the request or its head arrives: 408 (best effort) and the close.
 * A connection that never sent a byte is closed without one (as nginx does: there is no
 * request to answer, and a flood of idle connections costs one close each). The handler, when
 * it was called, sees HS_TOE_TIMEOUT. */
static void request_timeout(struct hs_conn *c, const char *message)
{
    completed(c, HS_TOE_TIMEOUT);
    if (c->nreq > 0 || c->head_started)
        refuse_fd(c->s, c->fd, c->minor, 408, "request_timeout", message);
    conn_close(c, HS_TOE_TIMEOUT);
}

/* The deadlines (hsrv.h): every connection is looked at once per HS_SWEEP_MS. At most
 * HS_SWEEP_CLOSE_PER_TURN are closed per call: the sweep then stops at the next connection
 * (s->sweep_at) and the loop's next turn goes on from there. Returns 1 when it stopped early. */
static int sweep(struct hs_server *s, uint64_t now)
{
    struct hs_conn *c =
        s->sweep_at != NULL && s->sweep_at->state != CS_CLOSED ? s->sweep_at : s->conns;
    uint64_t closed0 = atomic_load_explicit(&s->st_open, memory_order_relaxed);

    s->sweep_at = NULL;
    while (c != NULL) {
        struct hs_conn *next = c->next;

        if (closed0 - atomic_load_explicit(&s->st_open, memory_order_relaxed) >=
            HS_SWEEP_CLOSE_PER_TURN) {
            s->sweep_at = c;
            return 1;
        }

        switch (c->state) {
        case CS_LINGER:
            if (now - c->last_ms >= HS_LINGER_IDLE_MS ||
                now - c->linger_start_ms >= HS_LINGER_TOTAL_MS)
                conn_close(c, HS_TOE_OK);
            break;
        case CS_HEAD:
            if (c->suspended)
                break;
            if (c->head_started || c->nreq == 0) {
                /* the head arrives: header_timeout_ms from its first byte (from the accept for
                 * a connection's first request) */
                uint64_t t0 = c->head_started ? c->head_start_ms : c->accept_ms;

                if (now - t0 >= s->header_timeout_ms) {
                    ST_ADD(s, st_header_timeouts, 1);
                    request_timeout(c, "request head not received in time (header_timeout_ms)");
                }
            } else if (now - c->last_ms >= s->keepalive_timeout_ms) {
                ST_ADD(s, st_timeouts, 1); /* idle between requests: a normal end */
                conn_close(c, HS_TOE_TIMEOUT);
            }
            break;
        case CS_BODY:
            /* body_timeout_ms, plus a second for every body_min_rate bytes received */
            if (!c->suspended && now - c->body_start_ms >=
                                     s->body_timeout_ms + c->body_got * 1000u / s->body_min_rate) {
                ST_ADD(s, st_body_timeouts, 1);
                request_timeout(c, "request body not received in time (body_timeout_ms, "
                                   "body_min_rate)");
            }
            break;
        case CS_SEND:
            if (!c->suspended && now - c->last_ms >= s->send_timeout_ms) {
                ST_ADD(s, st_send_timeouts, 1);
                conn_close(c, HS_TOE_TIMEOUT);
            }
            break;
        default:
            break;
        }
        c = next;
    }
    return 0;
}

int hs_server_run(struct hs_server *s)
{
    struct hs_conn *list;
    struct hs_conn *x;
    int did = 0;

    note_loop(s);
    pthread_mutex_lock(&s->xmu);
    x = s->xhead;
    s->xhead = NULL;
    for (struct hs_conn *c = x; c != NULL; c = c->xnext)
        c->in_x = 0;
    pthread_mutex_unlock(&s->xmu);
    while (x != NULL) {
        struct hs_conn *c = x;

        x = c->xnext;
        if (c->state != CS_CLOSED && c->suspended) {
            c->suspended = 0;
            resumed_push(s, c);
        }
    }
    /* the connections resumed so far; those resumed meanwhile wait for the next call */
    list = s->rhead;
    s->rhead = s->rtail = NULL;
    while (list != NULL) {
        struct hs_conn *c = list;

        list = c->rnext;
        c->in_r = 0;
        if (c->suspended)
            continue;
        did = 1;
        switch (c->state) {
        case CS_HEAD:
            conn_read(c);
            break;
        case CS_BODY:
            /* resumed while its body arrives: the bytes already read first */
            if (!c->chunked && c->body_left == 0) {
                body_complete(c);
                break;
            }
            if (c->rlen > 0)
                c->pending_parse = 1;
            conn_read(c);
            break;
        case CS_WAIT:
            call_final(c);
            break;
        case CS_SEND:
            conn_flush(c);
            break;
        default:
            break;
        }
    }
    {
        struct hs_conn *keep = NULL;

        while (s->graveyard != NULL) {
            struct hs_conn *c = s->graveyard;

            s->graveyard = c->gnext;
            if (c->in_r || c->held) {
                c->gnext = keep; /* still on the resumed or held list: freed by a later call */
                keep = c;
                continue;
            }
            free(c);
        }
        s->graveyard = keep;
    }
    return did || s->rhead != NULL;
}

int hs_server_housekeep(struct hs_server *s)
{
    uint64_t now = tg_loop_mono_ms();

    note_loop(s);
    if (s->accept_more && s->lfd >= 0)
        accept_all(s);
    if (s->sweep_at != NULL || now >= s->next_sweep_ms) {
        if (s->sweep_at == NULL)
            s->next_sweep_ms = now + HS_SWEEP_MS;
        sweep(s, now);
    }
    /* what the sweep closed is freed at the end of the next hs_server_run */
    return (s->accept_more && s->lfd >= 0) || s->sweep_at != NULL;
}

void hs_hold(struct hs_conn *c)
{
    c->hold = 1;
}

int hs_server_release(struct hs_server *s)
{
    struct hs_conn *list = s->hhead;

    s->hhead = s->htail = NULL;
    while (list != NULL) {
        struct hs_conn *c = list;

        list = c->hnext; /* before the flush: it may hold c again, on the new list */
        c->held = 0;
        c->hold = 0;
        if (c->state == CS_SEND)
            conn_flush(c);
    }
    return s->hhead != NULL;
}

int hs_server_timeout_ms(const struct hs_server *s)
{
    uint64_t now;

    if (s->rhead != NULL || s->hhead != NULL || (s->accept_more && s->lfd >= 0) || s->sweep_at != NULL)
        return 0;
    now = tg_loop_mono_ms();
    return now >= s->next_sweep_ms ? 0 : (int)(s->next_sweep_ms - now);
}

struct hs_server *hs_server_create(const struct hs_config *cfg, char *err, size_t errlen)
{
    struct hs_server *s = calloc(1, sizeof(*s));
    struct sockaddr_in sa = cfg->addr;
    socklen_t sl = sizeof(sa);
    struct epoll_event ev;
    int one = 1;

    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->kind = HS_KIND_LISTEN;
    s->cfg = *cfg;
    s->head_max = cfg->head_max_bytes > 0 ? cfg->head_max_bytes : HS_HEAD_MAX_DEFAULT;
    s->rbuf_cap = s->head_max + HP_CHUNK_LINE_MAX;
    s->linger_max = cfg->linger_max_bytes > 0 ? cfg->linger_max_bytes : HS_LINGER_MAX_BYTES_DEFAULT;
    s->header_timeout_ms =
        cfg->header_timeout_ms > 0 ? cfg->header_timeout_ms : HS_HEADER_TIMEOUT_MS_DEFAULT;
    s->body_timeout_ms =
        cfg->body_timeout_ms > 0 ? cfg->body_timeout_ms : HS_BODY_TIMEOUT_MS_DEFAULT;
    s->body_min_rate = cfg->body_min_rate > 0 ? cfg->body_min_rate : HS_BODY_MIN_RATE_DEFAULT;
    s->keepalive_timeout_ms =
        cfg->keepalive_timeout_ms > 0 ? cfg->keepalive_timeout_ms : HS_KEEPALIVE_TIMEOUT_MS_DEFAULT;
    s->send_timeout_ms =
        cfg->send_timeout_ms > 0 ? cfg->send_timeout_ms : HS_SEND_TIMEOUT_MS_DEFAULT;
    if (cfg->max_connections == 0) {
        snprintf(err, errlen, "max_connections must be at least 1");
        free(s);
        return NULL;
    }
    if (s->rbuf_cap < HS_SCRATCH_BYTES)
        s->rbuf_cap = HS_SCRATCH_BYTES;
    s->next_sweep_ms = tg_loop_mono_ms() + HS_SWEEP_MS;
    pthread_mutex_init(&s->xmu, NULL);
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto fail;
    }
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (cfg->reuse_port && setsockopt(s->lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        snprintf(err, errlen, "SO_REUSEPORT: %s", strerror(errno));
        goto fail;
    }
    if (bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errlen, "bind: %s", strerror(errno));
        goto fail;
    }
    if (listen(s->lfd, cfg->backlog > 0 ? cfg->backlog : 1024) != 0) {
        snprintf(err, errlen, "listen: %s", strerror(errno));
        goto fail;
    }
    if (getsockname(s->lfd, (struct sockaddr *)&sa, &sl) != 0) {
        snprintf(err, errlen, "getsockname: %s", strerror(errno));
        goto fail;
    }
    s->port = ntohs(sa.sin_port);
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN | EPOLLET;
    ev.data.ptr = s;
    if (epoll_ctl(cfg->epfd, EPOLL_CTL_ADD, s->lfd, &ev) != 0) {
        snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    return s;
fail:
    if (s->lfd >= 0)
        close(s->lfd);
    pthread_mutex_destroy(&s->xmu);
    free(s);
    return NULL;
}

uint16_t hs_server_port(const struct hs_server *s)
{
    return s->port;
}

void hs_server_quiesce(struct hs_server *s)
{
    /* Idle kept-alive connections stay open: a client may be sending its next request on one
     * right now, and a POST on a connection that closes unanswered is not retried by most
     * clients. That request is served, with Connection: close, like every response from now
     * on; hs_server_destroy closes what is left at the end of the drain. */
    s->quiesced = 1;
    if (s->lfd >= 0) {
        close(s->lfd);
        s->lfd = -1;
    }
}

void hs_server_stats(const struct hs_server *s, struct hs_stats *out)
{
    out->accepted = atomic_load_explicit(&s->st_accepted, memory_order_relaxed);
    out->refused = atomic_load_explicit(&s->st_refused, memory_order_relaxed);
    out->refused_ip = atomic_load_explicit(&s->st_refused_ip, memory_order_relaxed);
    out->header_timeouts = atomic_load_explicit(&s->st_header_timeouts, memory_order_relaxed);
    out->body_timeouts = atomic_load_explicit(&s->st_body_timeouts, memory_order_relaxed);
    out->send_timeouts = atomic_load_explicit(&s->st_send_timeouts, memory_order_relaxed);
    out->linger_cut = atomic_load_explicit(&s->st_linger_cut, memory_order_relaxed);
    out->requests = atomic_load_explicit(&s->st_requests, memory_order_relaxed);
    out->bad_requests = atomic_load_explicit(&s->st_bad, memory_order_relaxed);
    out->timeouts = atomic_load_explicit(&s->st_timeouts, memory_order_relaxed);
    out->open = atomic_load_explicit(&s->st_open, memory_order_relaxed);
}

void hs_server_destroy(struct hs_server **sp)
{
    struct hs_server *s;

    if (sp == NULL || *sp == NULL)
        return;
    s = *sp;
    *sp = NULL;
    while (s->conns != NULL)
        conn_close(s->conns, HS_TOE_SHUTDOWN);
    while (s->graveyard != NULL) {
        struct hs_conn *c = s->graveyard;

        s->graveyard = c->gnext;
        free(c);
    }
    if (s->lfd >= 0)
        close(s->lfd);
    pthread_mutex_destroy(&s->xmu);
    free(s);
}
