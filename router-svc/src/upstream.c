#include "upstream.h"

#include <curl/curl.h>
#include <errno.h>
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

#include "tg_err.h"
#include "tg_log.h"
#include "tg_time.h"

/* epoll events handled per wakeup of the loop */
#define RT_UPSTREAM_EVENTS_BATCH 64
/* Sockets below this descriptor number that curl opened through us keep their epoll
 * registration between transfers (see socket_cb); higher ones are registered per transfer. */
#define RT_UPSTREAM_FD_TABLE 65536

/* fd table states (one byte per descriptor) */
enum {
    FD_OURS = 1,    /* opened by opensocket_cb, not yet closed */
    FD_IN_EPOLL = 2, /* registered in up->epfd */
    FD_WATCHED = 4, /* curl watches it now (else the registration is only kept) */
    FD_EV_IN = 8,   /* registered events */
    FD_EV_OUT = 16
};

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
    _Atomic uint64_t st_active;
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

static size_t write_cb(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct slot *s = userdata;
    size_t n = size * nmemb;
    long code = 0;

    if (s->ttfb_us == 0)
        s->ttfb_us = tg_now_mono_us() - s->start_us + 1;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
    if (s->stream && code >= 200 && code < 300 && s->ops->on_data != NULL) {
        size_t r = s->ops->on_data(s->ud, p, n);

        if (r == RT_UPSTREAM_PAUSE)
            return CURL_WRITEFUNC_PAUSE;
        return r;
    }
    if (s->resp_len + n > s->resp_cap) {
        if (s->stream) {
            /* error body of a stream: keep the head, drop the rest */
            n = s->resp_cap - s->resp_len;
            if (n == 0)
                return size * nmemb;
        } else {
            s->too_big = 1;
            return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
        }
    }
    if (s->resp_len + n + 1 > s->resp_alloc) {
        size_t want = s->resp_alloc ? s->resp_alloc : 4096;
        char *nb;

        while (want < s->resp_len + n + 1)
            want *= 2;
        if (want > s->resp_cap + 1)
            want = s->resp_cap + 1;
        nb = realloc(s->resp, want);
        if (nb == NULL)
            return 0;
        s->resp = nb;
        s->resp_alloc = want;
    }
    memcpy(s->resp + s->resp_len, p, n);
    s->resp_len += n;
    s->resp[s->resp_len] = '\0';
    return size * nmemb;
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

/* Finish a transfer: report to the owner, then free the slot. Loop thread. */
static void slot_finish(struct rt_upstream *up, uint32_t idx, CURLcode rc, int cancelled)
{
    struct slot *s = &up->slots[idx];
    struct rt_upstream_result res;

    memset(&res, 0, sizeof(res));
    res.retry_after_s = s->retry_after_s;
    res.ttfb_us = s->ttfb_us;
    if (s->state == SLOT_ACTIVE)
        curl_multi_remove_handle(up->multi, s->easy);
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &res.status);
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
        /* curl's text names hosts and reasons, never credentials */
        snprintf(res.detail, sizeof(res.detail), "%s", curl_easy_strerror(rc));
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

static void slot_start(struct rt_upstream *up, uint32_t idx)
{
    struct slot *s = &up->slots[idx];

    if (curl_multi_add_handle(up->multi, s->easy) != CURLM_OK) {
        s->state = SLOT_QUEUED;
        slot_finish(up, idx, CURLE_FAILED_INIT, 0);
        return;
    }
    s->state = SLOT_ACTIVE;
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
        if ((cmds & CMD_UNPAUSE) && s->state == SLOT_ACTIVE)
            curl_easy_pause(s->easy, CURLPAUSE_CONT);
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

    if (up->deadline_us == 0)
        return 1000;
    now = tg_now_mono_us();
    if (up->deadline_us <= now)
        return 0;
    if (up->deadline_us - now >= 1000000u)
        return 1000;
    /* round up: waking early would only spin */
    return (int)((up->deadline_us - now + 999) / 1000);
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

        if (fd == up->wakefd) {
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
    if (s->easy == NULL)
        s->easy = curl_easy_init();
    if (s->easy == NULL) {
        pthread_mutex_lock(&up->lock);
        up->free_stack[up->free_len++] = idx;
        pthread_mutex_unlock(&up->lock);
        free(req->body);
        req->body = NULL;
        return TG_ENOMEM;
    }
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
    s->start_us = tg_now_mono_us();
    s->errbuf[0] = '\0';
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
        if (cmd == CMD_CANCEL && s->state != SLOT_FREE)
            slot_finish(up, idx, CURLE_ABORTED_BY_CALLBACK, 1);
        else if (cmd == CMD_UNPAUSE && s->state == SLOT_ACTIVE)
            curl_easy_pause(s->easy, CURLPAUSE_CONT);
        return;
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
}

int rt_upstream_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : TG_EIO;
}

void rt_upstream_global_fini(void)
{
    curl_global_cleanup();
}
