/* hostile: hostile and legitimate HTTP clients for router-svc's hostile tier.
 *
 *   hostile legit  --port P --key K --rate R --conns N --duration S --out FILE [--src IP]
 *   hostile attack --kind KIND --port P --conns N --duration S [--src IP] [--key K]
 *                  [--gap-ms G] [--deadline-ms D] [--open-rate N]
 *
 * legit: N kept-alive connections opened first (a client's connection pool), chat completions
 * sent at R per second (open loop: latency counts from the scheduled time, so a stalled server
 * shows as latency, not as a lower rate). Every request is written to FILE as
 * "sched_ms latency_us status" (status 0: transport error). A connection the server closes is
 * opened again (counted). Prints one JSON line: requests, ok, failed, reconnects, p50/p99.
 *
 * attack: N connections at a time, each doing KIND until the server closes it, then a new one,
 * until the duration ends:
 *   slowloris  a request head dribbled one byte every G ms (never finished);
 *   slowbody   a POST without a key and a 1 MB Content-Length whose body is dribbled one byte
 *              every G ms after the headers;
 *   authslow   the same with a valid key (--key): the body deadline applies;
 *   bigbody    a POST with a wrong key and a 24 MiB body sent as fast as the socket takes it;
 *   ctlbytes   a head with a forbidden byte (NUL, bare CR, control bytes), in turn;
 *   flood      connections opened as fast as possible that send nothing (held until closed).
 * When the duration ends no connection is opened any more, and those still open get up to
 * HC_DRAIN_MS for their answers (a connection opened in the last instant is not counted as
 * unanswered for lack of time). For every connection: the status of the first answer (0: none), and the time from its
 * connect to the server's close. --deadline-ms D: a connection still open D ms after its
 * connect is counted as over its deadline (and closed by us). Prints one JSON line with the
 * counts per status, closes, the largest time to close and the over-deadline count.
 *
 * Bounds: at most HS_CONNS_MAX connections; every buffer has a fixed size. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HC_CONNS_MAX 20000
#define HC_IN_BYTES 4096 /* an answer's head and a small body are read into this */
#define HC_BIG_BODY_BYTES (24u * 1024u * 1024u) /* over max_body_bytes: discarded, then cut */
#define HC_SLOW_BODY_BYTES 1000000u
#define HC_STATUS_MAX 600
#define HC_DRAIN_MS 1000u /* after an attack: how long its open connections may still be answered */
#define HC_LAT_MAX 2000000 /* legit requests recorded at most */

enum kind { K_SLOWLORIS, K_SLOWBODY, K_AUTHSLOW, K_BIGBODY, K_CTLBYTES, K_FLOOD };

static const char *const kind_names[] = {"slowloris", "slowbody", "authslow",
                                         "bigbody",   "ctlbytes", "flood"};

struct opts {
    int legit;
    enum kind kind;
    uint16_t port;
    const char *key;
    const char *src;
    const char *out;
    double rate;
    int conns;
    double duration_s;
    int gap_ms;
    int deadline_ms;
    int open_rate; /* attack: new connections per second at most (0: as fast as possible) */
};

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* A non-blocking TCP connection to 127.0.0.1:port from src (NULL: any). -1 on failure. */
static int dial(const struct opts *o)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (o->src != NULL) {
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        inet_pton(AF_INET, o->src, &sa.sin_addr);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            close(fd);
            return -1;
        }
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(o->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Status of an answer's first line ("HTTP/1.x NNN"), 0 when not (yet) one. */
static int status_of(const char *b, size_t n)
{
    if (n < 12 || memcmp(b, "HTTP/1.", 7) != 0 || b[8] != ' ')
        return 0;
    if (b[9] < '1' || b[9] > '5' || b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9')
        return 0;
    return (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
}

/* ------------------------------------------------------------------ legit */

struct lconn {
    int fd;
    int busy;
    uint64_t sched_us; /* the request's scheduled time */
    char in[HC_IN_BYTES];
    size_t inlen;
};

struct lrec {
    uint32_t sched_ms;
    uint32_t lat_us;
    uint16_t status;
};

static int lat_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

static int legit_open(const struct opts *o, int ep, struct lconn *c, int idx)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)idx};

    c->fd = dial(o);
    c->busy = 0;
    c->inlen = 0;
    if (c->fd < 0)
        return -1;
    return epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

/* A whole answer in c->in: its length, 0 when not complete yet. Content-Length framing only
 * (the router answers chat completions that way). */
static size_t answer_len(const struct lconn *c)
{
    const char *e = memmem(c->in, c->inlen, "\r\n\r\n", 4);
    const char *cl;
    size_t head, body = 0;

    if (e == NULL)
        return 0;
    head = (size_t)(e + 4 - c->in);
    cl = memmem(c->in, head, "\r\nContent-Length: ", 18);
    if (cl == NULL)
        cl = memmem(c->in, head, "\r\ncontent-length: ", 18);
    if (cl != NULL)
        body = strtoul(cl + 18, NULL, 10);
    return c->inlen >= head + body ? head + body : 0;
}

static int run_legit(const struct opts *o)
{
    static char req[1024];
    const char *body = "{\"model\":\"gpt-main\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"hello from a legitimate client\"}]}";
    int reqlen = snprintf(req, sizeof(req),
                          "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\n"
                          "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                          "Content-Length: %zu\r\n\r\n%s",
                          o->key, strlen(body), body);
    struct lconn *cs = calloc((size_t)o->conns, sizeof(*cs));
    size_t nmax = (size_t)(o->rate * o->duration_s) + 16;
    struct lrec *recs;
    size_t nrec = 0, ok = 0, failed = 0, reconnects = 0, late = 0;
    int late_noted = 0;
    uint64_t t0, period_us, next_us, end_us;
    uint32_t *lats;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    FILE *out;

    if (nmax > HC_LAT_MAX)
        nmax = HC_LAT_MAX;
    recs = calloc(nmax, sizeof(*recs));
    if (cs == NULL || recs == NULL || ep < 0 || reqlen <= 0 || (size_t)reqlen >= sizeof(req))
        return 2;
    for (int i = 0; i < o->conns; i++) {
        if (legit_open(o, ep, &cs[i], i) != 0) {
            fprintf(stderr, "legit: cannot connect\n");
            return 2;
        }
    }
    usleep(100000); /* the pool is open before the first request */
    t0 = now_us();
    period_us = (uint64_t)(1e6 / o->rate);
    next_us = t0;
    end_us = t0 + (uint64_t)(o->duration_s * 1e6);
    for (;;) {
        struct epoll_event evs[64];
        uint64_t now = now_us();
        int n, wait_ms;

        /* send what is due on an idle connection (a due request waits for one: open loop) */
        while (next_us <= now && next_us < end_us && nrec < nmax) {
            int sent = 0;

            for (int i = 0; i < o->conns; i++) {
                if (cs[i].fd < 0 || cs[i].busy)
                    continue;
                if (send(cs[i].fd, req, (size_t)reqlen, MSG_NOSIGNAL) != reqlen) {
                    /* the pooled connection is gone: a new one (the request is not lost) */
                    epoll_ctl(ep, EPOLL_CTL_DEL, cs[i].fd, NULL);
                    close(cs[i].fd);
                    reconnects++;
                    if (legit_open(o, ep, &cs[i], i) != 0 ||
                        send(cs[i].fd, req, (size_t)reqlen, MSG_NOSIGNAL) != reqlen) {
                        recs[nrec++] = (struct lrec){(uint32_t)((next_us - t0) / 1000),
                                                     (uint32_t)(now - next_us), 0};
                        failed++;
                        sent = 1;
                        break;
                    }
                }
                cs[i].busy = 1;
                cs[i].sched_us = next_us;
                cs[i].inlen = 0;
                sent = 1;
                break;
            }
            if (!sent) {
                if (!late_noted) {
                    late++; /* this request waits for a connection: counted once */
                    late_noted = 1;
                }
                break; /* every connection busy: try again when one answers */
            }
            late_noted = 0;
            next_us += period_us;
        }
        if (now >= end_us) {
            int busy = 0;

            for (int i = 0; i < o->conns; i++)
                busy += cs[i].busy;
            if (busy == 0 || now >= end_us + 30000000u)
                break;
        }
        wait_ms = next_us > now ? (int)((next_us - now) / 1000) : 0;
        if (wait_ms > 50)
            wait_ms = 50;
        n = epoll_wait(ep, evs, 64, wait_ms);
        now = now_us();
        for (int k = 0; k < n; k++) {
            struct lconn *c = &cs[evs[k].data.u32];
            ssize_t r = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, 0);
            size_t al;

            if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
                if (c->busy && nrec < nmax) {
                    recs[nrec++] = (struct lrec){(uint32_t)((c->sched_us - t0) / 1000),
                                                 (uint32_t)(now - c->sched_us), 0};
                    failed++;
                }
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                reconnects++;
                legit_open(o, ep, c, (int)evs[k].data.u32);
                continue;
            }
            if (r < 0)
                continue;
            c->inlen += (size_t)r;
            al = answer_len(c);
            if (al == 0 && c->inlen == sizeof(c->in)) {
                al = c->inlen; /* larger than expected: counted by its status */
            }
            if (al == 0 || !c->busy)
                continue;
            {
                int st = status_of(c->in, c->inlen);

                if (nrec < nmax)
                    recs[nrec++] = (struct lrec){(uint32_t)((c->sched_us - t0) / 1000),
                                                 (uint32_t)(now - c->sched_us), (uint16_t)st};
                if (st == 200)
                    ok++;
                else
                    failed++;
            }
            memmove(c->in, c->in + al, c->inlen - al);
            c->inlen -= al;
            c->busy = 0;
        }
    }
    out = fopen(o->out, "w");
    if (out == NULL)
        return 2;
    lats = calloc(nrec > 0 ? nrec : 1, sizeof(*lats));
    for (size_t i = 0; i < nrec; i++) {
        fprintf(out, "%u %u %u\n", recs[i].sched_ms, recs[i].lat_us, recs[i].status);
        lats[i] = recs[i].lat_us;
    }
    fclose(out);
    qsort(lats, nrec, sizeof(*lats), lat_cmp);
    printf("{\"requests\":%zu,\"ok\":%zu,\"failed\":%zu,\"reconnects\":%zu,\"late\":%zu,"
           "\"p50_us\":%u,\"p99_us\":%u}\n",
           nrec, ok, failed, reconnects, late, nrec ? lats[nrec / 2] : 0,
           nrec ? lats[(nrec * 99) / 100] : 0);
    free(lats);
    free(recs);
    for (int i = 0; i < o->conns; i++)
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    free(cs);
    close(ep);
    return failed > 0 ? 1 : 0;
}

/* ------------------------------------------------------------------ attack */

struct aconn {
    int fd;
    int status;      /* first answer's status, 0 none yet */
    uint64_t t_open; /* connect */
    uint64_t t_next; /* next dribble */
    size_t sent;     /* bytes of the script sent */
    size_t script_len;
    const char *script; /* what to send (slowloris, ctl) */
    size_t body_sent;
    int fin; /* the server half-closed (FIN): a hostile client goes on sending */
    char in[512];
    size_t inlen;
};

#define RAW(s)                                                                                     \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }
static const struct {
    const char *s;
    size_t n;
} ctl_heads[] = {
    RAW("GET /health/liveness HTTP/1.1\r\nHost: a\0b\r\n\r\n"),
    RAW("GET /health/liveness HTTP/1.1\r\nHost: a\r\n\rX-Hidden: 1\r\n\r\n"),
    RAW("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-A: \x01\x02\r\n\r\n"),
    RAW("GET /v1/mo\0dels HTTP/1.1\r\nHost: a\r\n\r\n"),
    RAW("\0\0\0\0"),
    RAW("GET /health/liveness HTTP/1.1\r\nHost: a\rb\r\n\r\n"),
};
#define CTL_N (sizeof(ctl_heads) / sizeof(ctl_heads[0]))

struct astats {
    uint64_t opened, closed, over_deadline, connect_fail, statuses[HC_STATUS_MAX];
    uint64_t max_close_ms;
};

static void a_open(const struct opts *o, int ep, struct aconn *c, int idx, struct astats *st)
{
    static char slow_head[256], slowbody_head[512], big_head[512];
    static int ctl_turn;
    /* writability only matters to the kinds that send as fast as the socket takes (edge
     * triggered); the dribblers send on their own clock */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)idx};

    memset(c, 0, sizeof(*c));
    c->fd = dial(o);
    if (c->fd < 0) {
        st->connect_fail++;
        return;
    }
    st->opened++;
    c->t_open = c->t_next = now_us();
    switch (o->kind) {
    case K_SLOWLORIS:
        snprintf(slow_head, sizeof(slow_head),
                 "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nX-Slow-%d: "
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                 idx);
        c->script = slow_head;
        c->script_len = strlen(slow_head);
        break;
    case K_SLOWBODY:
    case K_AUTHSLOW: {
        char auth[300] = "";

        if (o->kind == K_AUTHSLOW)
            snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", o->key);
        snprintf(slowbody_head, sizeof(slowbody_head),
                 "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\n%sContent-Type: "
                 "application/json\r\nContent-Length: %u\r\n\r\n{",
                 auth, HC_SLOW_BODY_BYTES);
        c->script = slowbody_head;
        c->script_len = strlen(slowbody_head);
        break;
    }
    case K_BIGBODY:
        ev.events |= EPOLLOUT | EPOLLET;
        snprintf(big_head, sizeof(big_head),
                 "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nAuthorization: Bearer "
                 "sk-wrong-key-0123456789\r\nContent-Type: application/json\r\nContent-Length: "
                 "%u\r\n\r\n",
                 HC_BIG_BODY_BYTES);
        c->script = big_head;
        c->script_len = strlen(big_head);
        break;
    case K_CTLBYTES:
        ev.events |= EPOLLOUT | EPOLLET;
        c->script = ctl_heads[(size_t)ctl_turn % CTL_N].s;
        c->script_len = ctl_heads[(size_t)ctl_turn % CTL_N].n;
        ctl_turn++;
        break;
    case K_FLOOD:
        c->script = "";
        c->script_len = 0;
        break;
    }
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void a_close(int ep, struct aconn *c, struct astats *st, int by_server)
{
    uint64_t ms = (now_us() - c->t_open) / 1000;

    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (by_server) {
        st->closed++;
        if (ms > st->max_close_ms)
            st->max_close_ms = ms;
    }
    if (c->status > 0 && c->status < HC_STATUS_MAX)
        st->statuses[c->status]++;
    else
        st->statuses[0]++;
}

/* Send what the kind sends now. Returns -1 when a send found the connection closed by the
 * server (reset after its close). */
static int a_push(const struct opts *o, struct aconn *c, uint64_t now)
{
    static char zeros[64 * 1024];

    if (c->fd < 0)
        return 0;
    if (o->kind == K_SLOWLORIS ||
        ((o->kind == K_SLOWBODY || o->kind == K_AUTHSLOW) && c->sent >= c->script_len)) {
        /* one byte per gap: the head (slowloris) or the body after the head */
        ssize_t n = 0;

        if (now < c->t_next)
            return 0;
        if (o->kind == K_SLOWLORIS && c->sent < c->script_len) {
            n = send(c->fd, c->script + c->sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n == 1)
                c->sent++;
        } else if (o->kind != K_SLOWLORIS) {
            n = send(c->fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n == 1)
                c->body_sent++;
        }
        c->t_next = now + (uint64_t)o->gap_ms * 1000u;
        return n < 0 && (errno == EPIPE || errno == ECONNRESET) ? -1 : 0;
    }
    while (c->sent < c->script_len) {
        ssize_t n =
            send(c->fd, c->script + c->sent, c->script_len - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n <= 0)
            return n < 0 && (errno == EPIPE || errno == ECONNRESET) ? -1 : 0;
        c->sent += (size_t)n;
    }
    if (o->kind == K_BIGBODY) {
        while (c->body_sent < HC_BIG_BODY_BYTES) {
            size_t want = HC_BIG_BODY_BYTES - c->body_sent;
            ssize_t n;

            if (want > sizeof(zeros))
                want = sizeof(zeros);
            n = send(c->fd, zeros, want, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n <= 0)
                return n < 0 && (errno == EPIPE || errno == ECONNRESET) ? -1 : 0;
            c->body_sent += (size_t)n;
        }
        if (c->fin && now >= c->t_next) {
            /* all sent and answered: a byte now and then, to see the server's close */
            ssize_t n = send(c->fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);

            c->t_next = now + 200000u;
            if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                return -1;
        }
    }
    return 0;
}

static int run_attack(const struct opts *o)
{
    struct aconn *cs = calloc((size_t)o->conns, sizeof(*cs));
    struct astats st;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    uint64_t t0 = now_us();
    uint64_t end_us = t0 + (uint64_t)(o->duration_s * 1e6);
    int opened_all = 0;
    int draining = 0; /* the attack's time is up: no new connection, answers still read */

    memset(&st, 0, sizeof(st));
    if (cs == NULL || ep < 0)
        return 2;
    for (int i = 0; i < o->conns; i++)
        cs[i].fd = -1;
    for (;;) {
        struct epoll_event evs[256];
        uint64_t now = now_us();
        int n;

        if (now >= end_us + HC_DRAIN_MS * 1000u)
            break;
        if (now >= end_us && !draining) {
            /* connections opened just before the end get their answers (or their server-side
             * deadline) instead of being counted unanswered */
            draining = 1;
        }
        if (draining) {
            int open = 0;

            for (int i = 0; i < o->conns && !open; i++)
                open = cs[i].fd >= 0;
            if (!open)
                break;
        }
        /* (re)open: up to 200 new connections per turn, so a flood ramps quickly, and no more
         * than open_rate a second */
        if (!draining) {
            int budget = 200;

            if (o->open_rate > 0) {
                uint64_t allowed = (now - t0) * (uint64_t)o->open_rate / 1000000u + 1;

                if (st.opened + st.connect_fail >= allowed)
                    budget = 0;
                else if (allowed - st.opened - st.connect_fail < (uint64_t)budget)
                    budget = (int)(allowed - st.opened - st.connect_fail);
            }

            for (int i = 0; i < o->conns && budget > 0; i++) {
                if (cs[i].fd >= 0 || (o->kind == K_FLOOD && opened_all))
                    continue;
                a_open(o, ep, &cs[i], i, &st);
                budget--;
            }
            if (st.opened >= (uint64_t)o->conns)
                opened_all = 1;
        }
        now = now_us(); /* after the opens: no connection is younger than now */
        for (int i = 0; i < o->conns; i++) {
            if (cs[i].fd < 0)
                continue;
            if (o->deadline_ms > 0 && now - cs[i].t_open > (uint64_t)o->deadline_ms * 1000u) {
                st.over_deadline++;
                a_close(ep, &cs[i], &st, 0);
                continue;
            }
            if (a_push(o, &cs[i], now) != 0)
                a_close(ep, &cs[i], &st, 1); /* the server closed it: our send was reset */
        }
        n = epoll_wait(ep, evs, 256, 20);
        for (int k = 0; k < n; k++) {
            struct aconn *c = &cs[evs[k].data.u32];

            if (c->fd < 0)
                continue;
            for (;;) {
                char tmp[4096];
                ssize_t r = recv(c->fd, tmp, sizeof(tmp), 0);

                if (r > 0) {
                    size_t take = (size_t)r;

                    if (take > sizeof(c->in) - c->inlen)
                        take = sizeof(c->in) - c->inlen;
                    memcpy(c->in + c->inlen, tmp, take);
                    c->inlen += take;
                    if (c->status == 0)
                        c->status = status_of(c->in, c->inlen);
                    continue;
                }
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    break;
                if (r == 0 &&
                    (o->kind == K_SLOWBODY || o->kind == K_AUTHSLOW || o->kind == K_BIGBODY)) {
                    /* a FIN after the answer: a hostile client goes on sending its body; the
                     * server's own close shows as a reset of a later send */
                    if (!c->fin) {
                        struct epoll_event ev = {.events = 0, .data.u32 = evs[k].data.u32};

                        c->fin = 1;
                        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                    }
                    break;
                }
                a_close(ep, c, &st, 1); /* closed (or reset) by the server */
                break;
            }
            if (c->fd >= 0 && (evs[k].events & EPOLLOUT) && a_push(o, c, now_us()) != 0)
                a_close(ep, c, &st, 1);
        }
    }
    for (int i = 0; i < o->conns; i++) {
        if (cs[i].fd >= 0)
            a_close(ep, &cs[i], &st, 0);
    }
    printf("{\"kind\":\"%s\",\"opened\":%llu,\"connect_fail\":%llu,\"closed_by_server\":%llu,"
           "\"over_deadline\":%llu,\"max_close_ms\":%llu,\"statuses\":{",
           kind_names[o->kind], (unsigned long long)st.opened, (unsigned long long)st.connect_fail,
           (unsigned long long)st.closed, (unsigned long long)st.over_deadline,
           (unsigned long long)st.max_close_ms);
    {
        int first = 1;

        for (int s = 0; s < HC_STATUS_MAX; s++) {
            if (st.statuses[s] == 0)
                continue;
            printf("%s\"%d\":%llu", first ? "" : ",", s, (unsigned long long)st.statuses[s]);
            first = 0;
        }
    }
    printf("}}\n");
    free(cs);
    close(ep);
    return 0;
}

/* ------------------------------------------------------------------ main */

static int usage(void)
{
    fprintf(stderr, "usage: hostile legit --port P --key K --rate R --conns N --duration S "
                    "--out FILE [--src IP]\n"
                    "       hostile attack --kind slowloris|slowbody|authslow|bigbody|ctlbytes|"
                    "flood --port P --conns N --duration S [--src IP] [--key K] [--gap-ms G] "
                    "[--deadline-ms D] [--open-rate N]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct opts o = {.conns = 1, .rate = 100, .duration_s = 10, .gap_ms = 1000};

    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "legit") == 0)
        o.legit = 1;
    else if (strcmp(argv[1], "attack") != 0)
        return usage();
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];

        if (strcmp(k, "--port") == 0)
            o.port = (uint16_t)atoi(v);
        else if (strcmp(k, "--key") == 0)
            o.key = v;
        else if (strcmp(k, "--src") == 0)
            o.src = v;
        else if (strcmp(k, "--out") == 0)
            o.out = v;
        else if (strcmp(k, "--rate") == 0)
            o.rate = atof(v);
        else if (strcmp(k, "--conns") == 0)
            o.conns = atoi(v);
        else if (strcmp(k, "--duration") == 0)
            o.duration_s = atof(v);
        else if (strcmp(k, "--gap-ms") == 0)
            o.gap_ms = atoi(v);
        else if (strcmp(k, "--deadline-ms") == 0)
            o.deadline_ms = atoi(v);
        else if (strcmp(k, "--open-rate") == 0)
            o.open_rate = atoi(v);
        else if (strcmp(k, "--kind") == 0) {
            int found = 0;

            for (int j = 0; j < 6; j++) {
                if (strcmp(v, kind_names[j]) == 0) {
                    o.kind = (enum kind)j;
                    found = 1;
                }
            }
            if (!found)
                return usage();
        } else {
            return usage();
        }
    }
    if (o.port == 0 || o.conns < 1 || o.conns > HC_CONNS_MAX || o.duration_s <= 0 || o.rate <= 0 ||
        (o.legit && (o.key == NULL || o.out == NULL)) ||
        (!o.legit && o.kind == K_AUTHSLOW && o.key == NULL))
        return usage();
    raise_nofile();
    return o.legit ? run_legit(&o) : run_attack(&o);
}
