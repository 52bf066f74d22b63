#include "upstream.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"
#include "upstream_int.h"

/* SSL_CERT_FILE (OpenSSL's and curl's name): a CA bundle that replaces the system's store for
 * the providers' certificates, its name read once at start. "" when unset. */
static char ca_file[4096];
/* libcurl's built-in CA bundle and directory ("" when it has none): a transfer without a CA of
 * its own sets them back, since slots reuse their easy handles without a reset. */
static char default_ca_file[4096];
static char default_ca_path[4096];

uint64_t up_handle_make(uint32_t idx, uint32_t gen)
{
    return ((uint64_t)gen << 32) | idx;
}

/* Queue cmd for slot idx when the handle's generation is current. Caller holds up->lock. */
void up_cmd_post_locked(struct rt_upstream *up, uint32_t idx, unsigned cmd)
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
int up_resp_append(struct slot *s, const char *p, size_t n)
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
        /* first 1 KiB: a short answer's buffer stays within malloc's per-thread cache */
        size_t want = s->resp_alloc ? s->resp_alloc : 1024;
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

    s->last_byte_us = tg_loop_mono_us();
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
        if (up_slot_stash(s, p + took, n - took, NULL, 0) != 0)
            return 0;
        curl_easy_pause(s->easy, CURLPAUSE_RECV);
        return n;
    }
    if (up_resp_append(s, p, n) != 0)
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR (too_big says which) */
    return size * nmemb;
}

/* Resume a libcurl stream: what a pause kept (curl_deliver's rest) first, then curl's own. */
static void curl_unpause(struct slot *s)
{
    s->last_byte_us = tg_loop_mono_us();
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

int up_has_content_type(const struct rt_upstream_request *req)
{
    for (int i = 0; i < RT_UPSTREAM_HEADERS_MAX && req->headers[i] != NULL; i++) {
        if (strncasecmp(req->headers[i], "Content-Type:", 13) == 0)
            return 1;
    }
    return 0;
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

void up_slot_release(struct rt_upstream *up, uint32_t idx)
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

uint64_t up_slot_deadline(const struct slot *s, uint64_t now)
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
    up->slots[up->heap[a]].heap_at = (uint32_t)a + 1;
    up->slots[up->heap[b]].heap_at = (uint32_t)b + 1;
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

void up_timer_arm(struct rt_upstream *up, uint32_t idx, uint64_t deadline)
{
    struct slot *s = &up->slots[idx];

    s->deadline_us = deadline;
    if (s->heap_at == 0) {
        up->heap[up->heap_len++] = idx;
        s->heap_at = (uint32_t)up->heap_len;
    }
    heap_fix(up, s->heap_at - 1);
}

void up_timer_disarm(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];
    size_t i = s->heap_at;

    if (i == 0)
        return;
    i--;
    s->heap_at = 0;
    up->heap_len--;
    if (i != up->heap_len) {
        up->heap[i] = up->heap[up->heap_len];
        up->slots[up->heap[i]].heap_at = (uint32_t)i + 1;
        heap_fix(up, i);
    }
}

/* Keep what a pause left: dec body bytes not delivered, then raw bytes not parsed. */
int up_slot_stash(struct slot *s, const char *dec, size_t ndec, const char *raw, size_t nraw)
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

/* Finish a transfer: report to the owner, then free the slot. Loop thread. */
void up_slot_finish(struct rt_upstream *up, uint32_t idx, CURLcode rc, int cancelled)
{
    struct slot *s = &up->slots[idx];
    struct rt_upstream_result res;

    memset(&res, 0, sizeof(res));
    res.retry_after_s = s->retry_after_s;
    res.ttfb_us = s->ttfb_us;
    if (s->native) {
        up_timer_disarm(up, idx);
        /* still attached: cancelled mid-transfer */
        if (cancelled)
            h1c_conn_drain(up, s);
        else
            h1c_conn_release(up, s, RT_UPC_FAILED);
        res.status = s->status;
    } else {
        up_timer_disarm(up, idx);
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
        /* curl's own message names the reason ("SSL certificate problem: unable to get local
         * issuer certificate"); its code's generic text when it left none */
        snprintf(res.detail, sizeof(res.detail), "%.127s",
                 s->native || s->errbuf[0] != '\0' ? s->errbuf : curl_easy_strerror(rc));
    }
    res.body = s->resp;
    res.body_len = s->resp_len;
    s->resp = NULL;
    atomic_fetch_add(&up->st_completed, 1);
    s->ops->on_done(s->ud, &res);
    free(res.body);
    /* no curl_easy_reset: submit sets every option a transfer uses, and a reset would cost a
     * few KB of memset per request */
    up_slot_release(up, idx);
}

/* A libcurl stream keeps the built-in client's clock too: first byte within timeout_ms, then
 * no gap longer than idle_ms (paused time excluded). curl's own low-speed limit averages over
 * seconds and ends a stalled stream 5-6 s late; it stays only as a backstop. Loop thread. */
static void curl_timer(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    if (s->stream)
        up_timer_arm(up, idx, up_slot_deadline(s, tg_loop_mono_us()));
}

static void slot_start(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    if (s->native) {
        h1c_start(up, idx, 0);
        return;
    }
    if (curl_multi_add_handle(up->multi, s->easy) != CURLM_OK) {
        s->state = SLOT_QUEUED;
        up_slot_finish(up, idx, CURLE_FAILED_INIT, 0);
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
                up_slot_finish(up, idx, CURLE_ABORTED_BY_CALLBACK, 1);
            continue;
        }
        if ((cmds & CMD_UNPAUSE) && s->state == SLOT_ACTIVE) {
            if (s->native)
                h1c_unpause(up, idx);
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
        up_slot_finish(up, (uint32_t)(s - up->slots), msg->data.result, 0);
    }
}

/* Sockets for curl: created here so that the fd table knows which descriptors it may keep
 * registered (curl's resolver pipes are closed behind our back and never enter the table). */
static curl_socket_t opensocket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
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
    uint64_t d = up->deadline_us != 0 ? up->deadline_us : UINT64_MAX;

    if (up->heap_len > 0 && up->slots[up->heap[0]].deadline_us < d)
        d = up->slots[up->heap[0]].deadline_us;
    if (up->drain_head != NULL && up->drain_head->drain_until_us < d)
        d = up->drain_head->drain_until_us;
    if (d == UINT64_MAX)
        return 1000;
    now = tg_loop_mono_us();
    if (d <= now)
        return 0;
    if (d - now >= 1000000u)
        return 1000;
    /* round up: waking early would only spin */
    return (int)((d - now + 999) / 1000);
}

/* Wake the loop for new commands. Coalesced: while a wakeup is pending and not yet taken by
 * the loop, further calls cost one atomic exchange instead of a write(2). */
void up_wake(struct rt_upstream *up)
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
            h1c_event(up, (uint32_t)(evs[i].data.u64 & 0xffffffffu), evs[i].events);
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
                    up->deadline_us <= tg_loop_mono_us();
         i++) {
        up->deadline_us = 0;
        curl_multi_socket_action(up->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    h1c_timers(up);
    drain_done(up);
}

/* Every transfer still owned gets its on_done (shutdown). Loop thread. */
static void loop_finish_all(struct rt_upstream *up)
{
    loop_commands(up);
    for (size_t i = 0; i < up->cap; i++) {
        if (up->slots[i].state != SLOT_FREE)
            up_slot_finish(up, (uint32_t)i, CURLE_ABORTED_BY_CALLBACK, 1);
    }
}

/* 1 when the caller is the embedded loop's owner thread and not inside a curl call, so a
 * command can run at once instead of going through the queue. */
int up_on_owner_thread(struct rt_upstream *up)
{
    return up->embedded && atomic_load_explicit(&up->owner_set, memory_order_acquire) &&
           pthread_equal(pthread_self(), up->owner) && !up->in_curl;
}

static void *loop_main(void *arg)
{
    struct rt_upstream *up = arg;

    pthread_setname_np(pthread_self(), "tg-upstream"); /* in top, perf and /proc/PID/task */
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
    /* a proxy from the environment applies to every provider of its scheme: curl honours it */
    up->native = cfg->native && getenv("http_proxy") == NULL && getenv("HTTP_PROXY") == NULL &&
                 getenv("all_proxy") == NULL && getenv("ALL_PROXY") == NULL;
    up->native_tls = cfg->native && getenv("https_proxy") == NULL &&
                     getenv("HTTPS_PROXY") == NULL && getenv("all_proxy") == NULL &&
                     getenv("ALL_PROXY") == NULL;
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
        up_wake(up);
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
                h1c_conn_close(up, up->conns[i], RT_UPC_SHUTDOWN);
        }
    }
    free(up->conns);
    free(up->conn_free);
    if (up->origins != NULL) {
        for (unsigned i = 0; i < up->n_origins; i++) {
            if (up->origins[i].sess != NULL)
                SSL_SESSION_free(up->origins[i].sess);
        }
    }
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
void up_slot_begin(struct slot *s, struct rt_upstream_request *req,
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
    s->start_us = s->last_byte_us = tg_loop_mono_us();
    s->errbuf[0] = '\0';
}

/* slot_give_back: a submit that failed after slot_begin: the body is freed, the slot free
 * again (its generation unchanged: no handle was given out). */
void up_slot_give_back(struct rt_upstream *up, uint32_t idx)
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
    if (up->native || up->native_tls) {
        const char *path = NULL;
        char hostport[sizeof(up->origins[0].hostport)];
        int oi;

        pthread_mutex_lock(&up->lock); /* the origin table grows under it */
        oi = h1c_origin_of(up, req, &path);
        if (oi >= 0)
            memcpy(hostport, up->origins[oi].hostport, sizeof(hostport));
        pthread_mutex_unlock(&up->lock);
        if (oi >= 0)
            return h1c_submit(up, idx, gen, (uint32_t)oi, path, hostport, req, ops, ud, handle);
        if (oi == -2)
            atomic_fetch_add(&up->st_native_full, 1);
    }
    up_slot_begin(s, req, ops, ud);
    if (s->easy == NULL)
        s->easy = curl_easy_init();
    if (s->easy == NULL) {
        up_slot_give_back(up, idx);
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
            struct curl_slist *n = hdrs;

            if (!up_has_content_type(req)) {
                n = curl_slist_append(hdrs, "Content-Type: application/json");
                if (n != NULL)
                    hdrs = n;
                else
                    cut = 1;
            }
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
    curl_easy_setopt(s->easy, CURLOPT_SSL_VERIFYPEER, req->tls_no_verify ? 0L : 1L);
    curl_easy_setopt(s->easy, CURLOPT_SSL_VERIFYHOST, req->tls_no_verify ? 0L : 2L);
    if (req->ca_file != NULL && req->ca_file[0] != '\0') {
        /* ssl_verify: PATH trusts that bundle alone, as Python's requests does */
        curl_easy_setopt(s->easy, CURLOPT_CAINFO, req->ca_file);
        curl_easy_setopt(s->easy, CURLOPT_CAPATH, NULL);
    } else {
        const char *cf = NULL;
        const char *cp = NULL;

        up_ca_store(&cf, &cp);
        /* A bundle file alone: libcurl keeps the store it loaded from it for every later
         * connection of this loop (its CA cache). With a directory as well it would build a
         * new store for each connection, reading the whole bundle again: some 40 ms on the
         * loop and most of a megabyte kept per pooled connection for Debian's 150 CAs. The
         * directory alone is read a certificate at a time, as a chain needs it. */
        curl_easy_setopt(s->easy, CURLOPT_CAINFO, cf);
        curl_easy_setopt(s->easy, CURLOPT_CAPATH, cp);
    }
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
    *handle = up_handle_make(idx, gen);
    if (up_on_owner_thread(up)) {
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
            up_cmd_post_locked(up, idx, CMD_CANCEL);
            pthread_mutex_unlock(&up->lock);
            up_wake(up);
        }
        return 0;
    }
    pthread_mutex_lock(&up->lock);
    s->submitted = 1;
    up_cmd_post_locked(up, idx, CMD_SUBMIT);
    pthread_mutex_unlock(&up->lock);
    up_wake(up);
    return 0;
}

static void post_for_handle(struct rt_upstream *up, uint64_t handle, unsigned cmd)
{
    uint32_t idx = (uint32_t)(handle & 0xffffffffu);
    uint32_t gen = (uint32_t)(handle >> 32);
    int posted = 0;

    if (idx >= up->cap)
        return;
    if (up_on_owner_thread(up)) {
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
            up_slot_finish(up, idx, CURLE_ABORTED_BY_CALLBACK, 1);
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
        up_cmd_post_locked(up, idx, cmd);
        posted = 1;
    }
    pthread_mutex_unlock(&up->lock);
    if (posted)
        up_wake(up);
}

void rt_upstream_shutdown(struct rt_upstream *up)
{
    pthread_mutex_lock(&up->lock);
    up->closed = 1;
    for (size_t i = 0; i < up->cap; i++) {
        if (up->slots[i].submitted)
            up_cmd_post_locked(up, (uint32_t)i, CMD_CANCEL);
    }
    pthread_mutex_unlock(&up->lock);
    up_wake(up);
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
    out->tls_handshakes = atomic_load(&m->st_tls_handshakes);
    out->tls_resumed = atomic_load(&m->st_tls_resumed);
    out->conns_opened = atomic_load(&m->st_conns_opened);
    for (int i = 0; i < RT_UPC_N; i++)
        out->conns_closed[i] = atomic_load(&m->st_conns_closed[i]);
    out->drained = atomic_load(&m->st_drained);
}

const char *rt_upstream_close_reason(int reason)
{
    static const char *const names[RT_UPC_N] = {
        [RT_UPC_FAILED] = "failed",           [RT_UPC_NOT_REUSABLE] = "not_reusable",
        [RT_UPC_CANCELLED] = "cancelled",     [RT_UPC_IDLE_EXPIRED] = "idle_expired",
        [RT_UPC_PEER_CLOSED] = "peer_closed", [RT_UPC_POOL_FULL] = "pool_full",
        [RT_UPC_SHUTDOWN] = "shutdown",
    };

    return reason >= 0 && reason < RT_UPC_N ? names[reason] : "unknown";
}

void up_ca_store(const char **file, const char **path)
{
    *file = NULL;
    *path = NULL;
    if (ca_file[0] != '\0')
        *file = ca_file; /* SSL_CERT_FILE: that bundle alone, as LiteLLM trusts it */
    else if (default_ca_path[0] != '\0')
        *path = default_ca_path;
    else if (default_ca_file[0] != '\0')
        *file = default_ca_file;
}

int rt_upstream_global_init(void)
{
    const char *f = getenv("SSL_CERT_FILE");

    CURL *probe;
    char *v = NULL;

    if (f != NULL && f[0] != '\0' && strlen(f) < sizeof(ca_file))
        memcpy(ca_file, f, strlen(f) + 1);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return TG_EIO;
    probe = curl_easy_init();
    if (probe == NULL)
        return TG_EIO;
    if (curl_easy_getinfo(probe, CURLINFO_CAINFO, &v) == CURLE_OK && v != NULL &&
        strlen(v) < sizeof(default_ca_file))
        memcpy(default_ca_file, v, strlen(v) + 1);
    v = NULL;
    if (curl_easy_getinfo(probe, CURLINFO_CAPATH, &v) == CURLE_OK && v != NULL &&
        strlen(v) < sizeof(default_ca_path))
        memcpy(default_ca_path, v, strlen(v) + 1);
    curl_easy_cleanup(probe);
    return 0;
}

void rt_upstream_global_fini(void)
{
    h1t_global_fini();
    curl_global_cleanup();
}
