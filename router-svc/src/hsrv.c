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

#include "tg_log.h"
#include "tg_time.h"

#define HS_HEAD_MAX_DEFAULT (16u * 1024u)
#define HS_SCRATCH_BYTES (16u * 1024u)      /* the loop's shared read buffer */
#define HS_STREAM_PIECE_BYTES (16u * 1024u) /* one reader call at most */
#define HS_CHUNK_PREFIX 10u                 /* hex size + CRLF, right-aligned */
#define HS_HEADERS_MAX 100u                 /* header lines per request */
#define HS_CHUNK_LINE_MAX 1024u             /* chunk-size line with its extensions */
#define HS_RESP_HEADER_ROOM 2048u
#define HS_RESP_TRAILER_ROOM 512u
#define HS_OUT_HEAD_BYTES (HS_RESP_HEADER_ROOM + 256u) /* status line, Date, framing, ... */
#define HS_SWEEP_MS 1000u                              /* idle checks */
#define HS_LINGER_IDLE_MS 2000u   /* after an early answer: drop input until quiet this long */
#define HS_LINGER_TOTAL_MS 10000u /* ... or at most this long */

enum { HS_KIND_LISTEN = 1, HS_KIND_CONN = 2 };

enum cstate {
    CS_HEAD = 0, /* reading a request head (or idle between requests) */
    CS_BODY,     /* reading the body, handing it to the handler */
    CS_WAIT,     /* body read; the handler has not answered yet */
    CS_SEND,     /* a response is being written */
    CS_LINGER,   /* answered early: dropping input until the client is done, then close */
    CS_CLOSED    /* closed; freed at the end of the loop turn */
};

enum { CH_SIZE = 0, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER };

struct hs_kv {
    const char *k;
    const char *v;
};

struct hs_response {
    hs_reader_fn reader;
    void *rcls;
    hs_free_fn rfree;
    char *body;
    size_t body_len;
    int close;
    size_t hlen;
    size_t tlen;
    char hdr[HS_RESP_HEADER_ROOM];
    char trl[HS_RESP_TRAILER_ROOM];
};

struct hs_conn {
    int kind;
    int fd;
    struct hs_server *s;
    struct hs_conn *prev, *next; /* every open connection */
    struct hs_conn *rnext;       /* resumed, loop thread */
    struct hs_conn *xnext;       /* resumed from another thread (s->xmu) */
    struct hs_conn *gnext;       /* closed, to free at the end of the turn */
    enum cstate state;
    int in_r, in_x;
    int suspended;
    int handler_live;  /* the handler was called and completed is owed */
    int in_process;    /* process() is on the stack for this connection */
    int pending_parse; /* rbuf holds bytes not parsed yet (pipelined) */
    int maybe_more;    /* the socket may hold unread bytes (no short read or EAGAIN seen) */
    uint64_t last_ms;
    uint64_t linger_start_ms;

    /* request */
    char *head; /* the head, parsed in place, followed by its kv table */
    size_t head_bytes;
    struct hs_kv *kv;
    unsigned nh, na;
    const char *method;
    const char *url;
    int minor;
    int keep_alive;
    int is_head;
    int chunked;
    uint64_t body_left; /* length framing; chunked: bytes left in the current chunk */
    int ch_state;
    unsigned ch_line;
    int ch_digits;
    void *req_ctx;

    /* read buffer while a request arrives in pieces (or pipelined bytes wait) */
    char *rbuf;
    size_t rlen;

    /* response */
    struct hs_response *resp;
    int resp_status;
    int early;       /* answered before the body was read whole */
    int close_after; /* close once the response is out */
    int stream_end;  /* nothing more to ask the reader */
    char *obuf;      /* unsent bytes of the head, a piece or the last chunk */
    size_t olen, ooff;
    int obuf_borrowed; /* obuf points into the server's scratch (only within one call) */
    size_t body_off;
};

struct hs_server {
    int kind;
    int lfd;
    struct hs_config cfg;
    size_t head_max;
    size_t rbuf_cap;
    uint16_t port;
    int quiesced;
    pthread_t loop_tid;
    int have_tid;
    struct hs_conn *conns;
    struct hs_conn *rhead, *rtail;
    pthread_mutex_t xmu;
    struct hs_conn *xhead; /* (xmu) */
    struct hs_conn *graveyard;
    uint64_t next_sweep_ms;
    /* counters: written by the loop thread only, read by any (hs_server_stats) */
    _Atomic uint64_t st_accepted, st_refused, st_requests, st_bad, st_timeouts, st_open;
    time_t date_t;
    char date[48];
    size_t date_len;
    char scratch[HS_SCRATCH_BYTES];
    char piece[HS_CHUNK_PREFIX + HS_STREAM_PIECE_BYTES + HS_RESP_TRAILER_ROOM + 16];
    char ohead[HS_OUT_HEAD_BYTES];
};

static void conn_close(struct hs_conn *c, enum hs_toe toe);
static void conn_read(struct hs_conn *c);
static void conn_flush(struct hs_conn *c);
static void start_send(struct hs_conn *c);

/* ------------------------------------------------------------------ small helpers */

static int is_tchar(unsigned char ch)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";

    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    return ch != 0 && strchr(extra, ch) != NULL;
}

static int hexval(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Percent-decode s in place ('+' as a space when plus). Bad escapes stay as they are. */
static void pct_decode(char *s, int plus)
{
    char *o = s;

    for (char *p = s; *p != '\0'; p++) {
        if (*p == '%' && hexval((unsigned char)p[1]) >= 0 && hexval((unsigned char)p[2]) >= 0) {
            *o++ = (char)(hexval((unsigned char)p[1]) * 16 + hexval((unsigned char)p[2]));
            p += 2;
        } else if (plus && *p == '+') {
            *o++ = ' ';
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* One writer: a relaxed load and store (plain moves), no locked instruction. */
#define ST_ADD(s, f, d)                                                                            \
    atomic_store_explicit(&(s)->f, atomic_load_explicit(&(s)->f, memory_order_relaxed) + (d),      \
                          memory_order_relaxed)

static const char *reason_of(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Status";
    }
}

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

static struct hs_response *response_new(void)
{
    struct hs_response *r = malloc(sizeof(*r));

    if (r == NULL)
        return NULL;
    r->reader = NULL;
    r->rcls = NULL;
    r->rfree = NULL;
    r->body = NULL;
    r->body_len = 0;
    r->close = 0;
    r->hlen = 0;
    r->tlen = 0;
    return r;
}

struct hs_response *hs_response_buffer(char *body, size_t len)
{
    struct hs_response *r = response_new();

    if (r == NULL) {
        free(body);
        return NULL;
    }
    r->body = body;
    r->body_len = body != NULL ? len : 0;
    return r;
}

struct hs_response *hs_response_reader(hs_reader_fn reader, void *cls, hs_free_fn free_fn)
{
    struct hs_response *r = response_new();

    if (r == NULL)
        return NULL;
    r->reader = reader;
    r->rcls = cls;
    r->rfree = free_fn;
    return r;
}

static int field_append(char *buf, size_t cap, size_t *len, const char *name, const char *value)
{
    size_t nl = strlen(name);
    size_t vl = strlen(value);

    if (nl == 0 || *len + nl + 2 + vl + 2 > cap)
        return -1;
    for (size_t i = 0; i < nl; i++) {
        if (!is_tchar((unsigned char)name[i]))
            return -1;
    }
    for (size_t i = 0; i < vl; i++) {
        if (value[i] == '\r' || value[i] == '\n')
            return -1; /* no header injection */
    }
    memcpy(buf + *len, name, nl);
    *len += nl;
    buf[(*len)++] = ':';
    buf[(*len)++] = ' ';
    memcpy(buf + *len, value, vl);
    *len += vl;
    buf[(*len)++] = '\r';
    buf[(*len)++] = '\n';
    return 0;
}

int hs_response_header(struct hs_response *r, const char *name, const char *value)
{
    if (strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Transfer-Encoding") == 0 ||
        strcasecmp(name, "Date") == 0)
        return -1;
    if (strcasecmp(name, "Connection") == 0) {
        if (strcasecmp(value, "close") == 0)
            r->close = 1;
        return 0; /* the server writes Connection itself */
    }
    return field_append(r->hdr, sizeof(r->hdr), &r->hlen, name, value);
}

int hs_response_trailer(struct hs_response *r, const char *name, const char *value)
{
    return field_append(r->trl, sizeof(r->trl), &r->tlen, name, value);
}

void hs_response_free(struct hs_response *r)
{
    if (r == NULL)
        return;
    if (r->reader != NULL && r->rfree != NULL)
        r->rfree(r->rcls);
    free(r->body);
    free(r);
}

/* ------------------------------------------------------------------ request accessors */

const char *hs_header(const struct hs_conn *c, const char *name)
{
    for (unsigned i = 0; i < c->nh; i++) {
        if (strcasecmp(c->kv[i].k, name) == 0)
            return c->kv[i].v;
    }
    return NULL;
}

const char *hs_query_arg(const struct hs_conn *c, const char *name)
{
    for (unsigned i = c->nh; i < c->nh + c->na; i++) {
        if (strcmp(c->kv[i].k, name) == 0)
            return c->kv[i].v;
    }
    return NULL;
}

size_t hs_head_bytes(const struct hs_conn *c)
{
    return c->head_bytes;
}

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
    free(c->head);
    c->head = NULL;
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
    c->ch_state = CH_SIZE;
    c->ch_line = 0;
    c->ch_digits = 0;
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
    if (toe == HS_TOE_TIMEOUT)
        ST_ADD(s, st_timeouts, 1);
    completed(c, toe);
    request_reset(c); /* a stream's free function runs after completed, as with MHD */
    free(c->rbuf);
    c->rbuf = NULL;
    c->rlen = 0;
    close(c->fd); /* leaves the epoll set with it */
    c->fd = -1;
    c->state = CS_CLOSED;
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

/* The server's own answer to a request it cannot take (400, 431, 501, 505): JSON in the
 * OpenAI error shape, then close. A request whose handler already ran ends with HS_TOE_ERROR. */
static void answer_own(struct hs_conn *c, int status, const char *code, const char *message)
{
    char *body = malloc(512);
    struct hs_response *r;
    int n;

    ST_ADD(c->s, st_bad, 1);
    completed(c, HS_TOE_ERROR);
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
    hs_response_header(r, "Content-Type", "application/json");
    hs_response_free(c->resp);
    c->resp = r;
    c->resp_status = status;
    c->early = 1; /* whatever the client still sends is dropped before the close */
    c->close_after = 1;
    c->is_head = 0;
    start_send(c);
}

/* ------------------------------------------------------------------ parsing the head */

/* End of the head in buf: offset just past the empty line, or 0 when not there yet. Accepts
 * CRLF and bare LF line ends. */
static size_t head_end(const char *buf, size_t len)
{
    const char *p = buf;
    const char *end = buf + len;

    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        if (p + 1 < end && p[1] == '\n')
            return (size_t)(p + 2 - buf);
        if (p + 2 < end && p[1] == '\r' && p[2] == '\n')
            return (size_t)(p + 3 - buf);
        p++;
    }
    return 0;
}

/* Cut the line at line (ending with LF, CR before it optional). Returns the next line. */
static char *line_cut(char *line)
{
    char *eol = strchr(line, '\n');

    *eol = '\0';
    if (eol > line && eol[-1] == '\r')
        eol[-1] = '\0';
    return eol + 1;
}

/* Request line into c. Returns 0 or a status with *msg; *query gets the query string. */
static int request_line(struct hs_conn *c, char *line, char **query, const char **msg)
{
    char *sp1 = strchr(line, ' ');
    char *sp2;
    char *target;

    if (sp1 == NULL || sp1 == line) {
        *msg = "malformed request line";
        return 400;
    }
    *sp1 = '\0';
    for (char *m = line; *m; m++) {
        if (!is_tchar((unsigned char)*m)) {
            *msg = "malformed request method";
            return 400;
        }
    }
    target = sp1 + 1;
    sp2 = strchr(target, ' ');
    if (sp2 == NULL || sp2 == target || strchr(sp2 + 1, ' ') != NULL) {
        *msg = "malformed request line";
        return 400;
    }
    *sp2 = '\0';
    if (strncmp(sp2 + 1, "HTTP/", 5) != 0 || sp2[6] < '0' || sp2[6] > '9' || sp2[7] != '.' ||
        sp2[8] < '0' || sp2[8] > '9' || sp2[9] != '\0') {
        *msg = "malformed HTTP version";
        return 400;
    }
    if (sp2[6] != '1') {
        *msg = "HTTP version not supported";
        return 505;
    }
    c->minor = sp2[8] - '0';
    c->method = line;
    c->is_head = strcmp(line, "HEAD") == 0;
    for (char *t = target; *t; t++) {
        if ((unsigned char)*t <= 0x20 || *t == 0x7f) {
            *msg = "malformed request target";
            return 400;
        }
    }
    if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
        /* absolute form: the path starts after the authority */
        char *slash = strchr(strstr(target, "//") + 2, '/');

        if (slash == NULL) {
            /* no path ("http://host"): the authority's last byte, unused, becomes "/" */
            slash = target + strlen(target) - 1;
            *slash = '/';
        }
        target = slash;
    }
    if (target[0] != '/' && strcmp(target, "*") != 0) {
        *msg = "malformed request target";
        return 400;
    }
    *query = strchr(target, '?');
    if (*query != NULL)
        *(*query)++ = '\0';
    pct_decode(target, 0);
    c->url = target;
    return 0;
}

/* Content-Length value: digits only. Returns 0 or -1. */
static int parse_length(const char *v, uint64_t *out)
{
    uint64_t x = 0;

    if (*v == '\0')
        return -1;
    for (; *v; v++) {
        if (*v < '0' || *v > '9' || x > (UINT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (uint64_t)(*v - '0');
    }
    *out = x;
    return 0;
}

/* Parse the head (n bytes at p, ending with the empty line) into c. Returns 0, or the status to
 * answer with (400, 431, 501, 503, 505) and a message. */
static int head_parse(struct hs_conn *c, const char *p, size_t n, const char **msg)
{
    size_t slots = 2;
    size_t table_off = (n + 1 + (_Alignof(struct hs_kv) - 1)) & ~(_Alignof(struct hs_kv) - 1);
    char *h;
    char *line;
    char *q = NULL;
    size_t cl_count = 0;
    uint64_t cl = 0;
    int te = 0, tok_close = 0, tok_keep = 0, rc;

    for (size_t i = 0; i < n; i++)
        slots += p[i] == '\n' || p[i] == '&';
    h = malloc(table_off + slots * sizeof(struct hs_kv));
    if (h == NULL) {
        *msg = "out of memory";
        return 503;
    }
    memcpy(h, p, n);
    h[n] = '\0';
    c->head = h;
    c->kv = (struct hs_kv *)(void *)(h + table_off);
    c->head_bytes = n;

    line = h;
    {
        char *next = line_cut(line);

        rc = request_line(c, line, &q, msg);
        if (rc != 0)
            return rc;
        line = next;
    }
    while (*line != '\0' && *line != '\r' && *line != '\n') {
        char *next = line_cut(line);
        char *colon, *v, *e;

        if (*line == ' ' || *line == '\t') {
            *msg = "folded header line";
            return 400;
        }
        colon = strchr(line, ':');
        if (colon == NULL || colon == line) {
            *msg = "malformed header line";
            return 400;
        }
        *colon = '\0';
        for (char *k = line; *k; k++) {
            if (!is_tchar((unsigned char)*k)) {
                *msg = "malformed header name";
                return 400;
            }
        }
        v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        e = v + strlen(v);
        while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
            *--e = '\0';
        for (char *k = v; *k; k++) {
            if (((unsigned char)*k < 0x20 && *k != '\t') || *k == 0x7f) {
                *msg = "control character in a header value";
                return 400;
            }
        }
        if (c->nh >= HS_HEADERS_MAX) {
            *msg = "too many header lines";
            return 431;
        }
        c->kv[c->nh].k = line;
        c->kv[c->nh].v = v;
        c->nh++;
        if (strcasecmp(line, "Content-Length") == 0) {
            uint64_t x;

            if (parse_length(v, &x) != 0) {
                *msg = "malformed Content-Length";
                return 400;
            }
            if (cl_count > 0 && x != cl) {
                *msg = "conflicting Content-Length headers";
                return 400;
            }
            cl = x;
            cl_count++;
        } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
            if (te || strcasecmp(v, "chunked") != 0) {
                *msg = "unsupported transfer coding (only chunked is)";
                return 501;
            }
            te = 1;
        } else if (strcasecmp(line, "Connection") == 0) {
            const char *t = v;

            while (*t != '\0') {
                size_t len;

                while (*t == ' ' || *t == '\t' || *t == ',')
                    t++;
                len = strcspn(t, " \t,");
                if (len == 5 && strncasecmp(t, "close", 5) == 0)
                    tok_close = 1;
                else if (len == 10 && strncasecmp(t, "keep-alive", 10) == 0)
                    tok_keep = 1;
                t += len;
            }
        }
        line = next;
    }
    if (te && cl_count > 0) {
        *msg = "Content-Length and Transfer-Encoding together";
        return 400;
    }
    c->chunked = te;
    c->body_left = te ? 0 : cl;
    c->ch_state = CH_SIZE;
    c->keep_alive = c->minor >= 1 ? !tok_close : (tok_keep && !tok_close);

    /* query arguments, decoded in place after the headers in the table */
    while (q != NULL && *q != '\0') {
        char *amp = strchr(q, '&');
        char *eq;

        if (amp != NULL)
            *amp = '\0';
        if (*q != '\0') {
            eq = strchr(q, '=');
            if (eq != NULL)
                *eq = '\0';
            pct_decode(q, 1);
            if (eq != NULL)
                pct_decode(eq + 1, 1);
            c->kv[c->nh + c->na].k = q;
            c->kv[c->nh + c->na].v = eq != NULL ? eq + 1 : "";
            c->na++;
        }
        q = amp != NULL ? amp + 1 : NULL;
    }
    return 0;
}

/* ------------------------------------------------------------------ sending */

static int status_has_body(int status)
{
    return !(status < 200 || status == 204 || status == 304);
}

/* Unsent bytes that point into the server's scratch are copied before the call returns. */
static int own_pending(struct hs_conn *c)
{
    char *copy;

    if (!c->obuf_borrowed)
        return 0;
    copy = malloc(c->olen - c->ooff);
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
            c->linger_start_ms = c->last_ms = tg_now_mono_ms();
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
    c->last_ms = tg_now_mono_ms();
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

    for (;;) {
        struct iovec iov[2];
        struct msghdr mh;
        size_t want = 0;
        int k = 0;
        ssize_t n;

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
            c->last_ms = tg_now_mono_ms();
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
                c->obuf_borrowed = 1;
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
            c->obuf_borrowed = 1;
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
    n = (size_t)snprintf(o, 64, "HTTP/1.%d %d %s\r\n", c->minor == 0 ? 0 : 1, status,
                         reason_of(status));
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
        n += (size_t)snprintf(o + n, 48, "Content-Length: %zu\r\n", r->body_len);
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
        free(r->body);
        r->body = NULL;
        r->body_len = 0;
        stream = 0;
    }
    c->state = CS_SEND;
    c->suspended = 0;
    c->stream_end = !stream;
    c->body_off = 0;
    c->obuf = o;
    c->obuf_borrowed = 1;
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
 * state changes (answered, closed, complete). */
static size_t chunked_feed(struct hs_conn *c, const char *buf, size_t len)
{
    size_t off = 0;

    while (off < len && c->state == CS_BODY && c->resp == NULL) {
        unsigned char ch = (unsigned char)buf[off];

        switch (c->ch_state) {
        case CH_SIZE:
        case CH_EXT:
            if (++c->ch_line > HS_CHUNK_LINE_MAX) {
                answer_own(c, 400, "bad_request", "chunk size line too long");
                return len;
            }
            off++;
            if (ch == '\n' || ch == '\r') {
                if (!c->ch_digits) {
                    answer_own(c, 400, "bad_request", "malformed chunk size");
                    return len;
                }
                c->ch_state = ch == '\r' ? CH_SIZE_LF : CH_DATA;
                if (ch == '\n')
                    goto size_done;
                break;
            }
            if (c->ch_state == CH_EXT)
                break;
            if (ch == ';' || ch == ' ' || ch == '\t') {
                c->ch_state = CH_EXT;
                break;
            }
            if (hexval(ch) < 0 || c->body_left > (UINT64_MAX >> 4)) {
                answer_own(c, 400, "bad_request", "malformed chunk size");
                return len;
            }
            c->body_left = c->body_left * 16 + (uint64_t)hexval(ch);
            c->ch_digits = 1;
            break;
        case CH_SIZE_LF:
            if (ch != '\n') {
                answer_own(c, 400, "bad_request", "malformed chunk size line");
                return len;
            }
            off++;
        size_done:
            c->ch_line = 0;
            c->ch_digits = 0;
            c->ch_state = c->body_left == 0 ? CH_TRAILER : CH_DATA;
            break;
        case CH_DATA: {
            size_t take = len - off;

            if (take > c->body_left)
                take = (size_t)c->body_left;
            c->body_left -= take;
            if (c->body_left == 0)
                c->ch_state = CH_DATA_CR;
            deliver(c, buf + off, take);
            off += take;
            break;
        }
        case CH_DATA_CR:
        case CH_DATA_LF:
            if (ch == '\r' && c->ch_state == CH_DATA_CR) {
                c->ch_state = CH_DATA_LF;
            } else if (ch == '\n') {
                c->ch_state = CH_SIZE;
                c->ch_line = 0;
            } else {
                answer_own(c, 400, "bad_request", "chunk data not followed by CRLF");
                return len;
            }
            off++;
            break;
        case CH_TRAILER:
            /* trailer lines until an empty one; ch_line counts the current line's bytes */
            off++;
            if (++c->ch_line + c->head_bytes > c->s->head_max) {
                answer_own(c, 431, "request_header_fields_too_large", "trailer section too large");
                return len;
            }
            if (ch == '\n') {
                int empty = c->ch_digits == 0; /* no byte but CR on this line */

                c->ch_digits = 0;
                if (empty) {
                    body_complete(c);
                    return off;
                }
            } else if (ch != '\r') {
                c->ch_digits = 1;
            }
            break;
        default:
            break;
        }
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
            size_t e;
            const char *msg = NULL;
            int st;
            size_t zero = 0;
            int rc;

            while (off < len && (buf[off] == '\r' || buf[off] == '\n'))
                off++; /* empty lines before a request line */
            if (off == len)
                break;
            e = head_end(buf + off, len - off);
            if ((e == 0 && len - off > s->head_max) || e > s->head_max) {
                answer_own(c, 431, "request_header_fields_too_large", "request headers too large");
                off = len;
                break;
            }
            if (e == 0)
                break;
            st = head_parse(c, buf + off, e, &msg);
            off += e;
            if (st != 0) {
                answer_own(c, st, st == 431 ? "request_header_fields_too_large" : "bad_request",
                           msg);
                off = len;
                break;
            }
            ST_ADD(s, st_requests, 1);
            c->state = CS_BODY;
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

/* Keep the unused tail of buf (the scratch or rbuf) in rbuf. Returns -1 when out of memory. */
static int keep_tail(struct hs_conn *c, const char *buf, size_t total, size_t used)
{
    size_t left = total - used;

    if (buf == c->rbuf) {
        if (left == 0) {
            free(c->rbuf);
            c->rbuf = NULL;
        } else if (used > 0) {
            memmove(c->rbuf, c->rbuf + used, left);
        }
        c->rlen = left;
        return 0;
    }
    if (left == 0)
        return 0;
    c->rbuf = malloc(c->s->rbuf_cap);
    if (c->rbuf == NULL)
        return -1;
    memcpy(c->rbuf, buf + used, left);
    c->rlen = left;
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
                c->last_ms = tg_now_mono_ms();
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
            buf = c->rbuf;
            have = c->rlen;
            cap = s->rbuf_cap;
        } else {
            buf = s->scratch;
            have = 0;
            cap = sizeof(s->scratch);
        }
        if (have == cap) {
            answer_own(c, 431, "request_header_fields_too_large", "request headers too large");
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
        c->last_ms = tg_now_mono_ms();
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
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        struct hs_conn *c;
        struct epoll_event ev;
        int one = 1;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                TG_WARN_RL("msg=http_accept_failed err=%d", errno);
            return;
        }
        if (s->cfg.max_connections > 0 &&
            atomic_load_explicit(&s->st_open, memory_order_relaxed) >= s->cfg.max_connections) {
            close(fd);
            ST_ADD(s, st_refused, 1);
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
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
        c->last_ms = tg_now_mono_ms();
        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
        ev.data.ptr = c;
        if (epoll_ctl(s->cfg.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
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

static void sweep(struct hs_server *s, uint64_t now)
{
    uint64_t idle_ms = (uint64_t)s->cfg.idle_timeout_s * 1000u;
    struct hs_conn *c = s->conns;

    while (c != NULL) {
        struct hs_conn *next = c->next;

        if (c->state == CS_LINGER) {
            if (now - c->last_ms >= HS_LINGER_IDLE_MS ||
                now - c->linger_start_ms >= HS_LINGER_TOTAL_MS)
                conn_close(c, HS_TOE_OK);
        } else if (idle_ms > 0 && !c->suspended &&
                   (c->state == CS_HEAD || c->state == CS_BODY || c->state == CS_SEND) &&
                   now - c->last_ms >= idle_ms) {
            conn_close(c, HS_TOE_TIMEOUT);
        }
        c = next;
    }
}

int hs_server_run(struct hs_server *s)
{
    struct hs_conn *list;
    struct hs_conn *x;
    int did = 0;
    uint64_t now;

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
    now = tg_now_mono_ms();
    if (now >= s->next_sweep_ms) {
        sweep(s, now);
        s->next_sweep_ms = now + HS_SWEEP_MS;
    }
    {
        struct hs_conn *keep = NULL;

        while (s->graveyard != NULL) {
            struct hs_conn *c = s->graveyard;

            s->graveyard = c->gnext;
            if (c->in_r) {
                c->gnext = keep; /* still on the resumed list: freed by a later call */
                keep = c;
                continue;
            }
            free(c);
        }
        s->graveyard = keep;
    }
    return did || s->rhead != NULL;
}

int hs_server_timeout_ms(const struct hs_server *s)
{
    uint64_t now;

    if (s->rhead != NULL)
        return 0;
    now = tg_now_mono_ms();
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
    s->rbuf_cap = s->head_max + HS_CHUNK_LINE_MAX;
    if (s->rbuf_cap < HS_SCRATCH_BYTES)
        s->rbuf_cap = HS_SCRATCH_BYTES;
    s->next_sweep_ms = tg_now_mono_ms() + HS_SWEEP_MS;
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
