/* Unit tests of hsrv, router-svc's HTTP/1.1 server, through its contract (hsrv.h) only.
 *
 * The server runs on a loop thread of this test that owns the epoll set, as router-svc's front
 * does: an eventfd tagged TAG_WAKE wakes it (stop, calls posted from the main thread, and the
 * server's wake for cross-thread hs_resume), every other event goes to hs_server_event, then
 * hs_server_run until it has nothing more. The handler is scripted per URL path (see
 * on_head/on_final): it echoes, suspends and resumes after a delay (from the loop thread or from
 * a resumer thread), streams, answers early, refuses. Every handler and completed call is
 * recorded in a pool of request records that live until the end of the scenario, so that a
 * second completed, a call after completed or a call while suspended is seen (not a
 * use-after-free) and reported as a contract violation.
 *
 * The clients are plain blocking sockets on 127.0.0.1 in the main thread, writing raw bytes and
 * reading raw responses: status lines, header values, Content-Length and chunk framing are
 * compared byte for byte. Every wait has a deadline.
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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hsrv.h"
#include "hsrv_int.h" /* HS_BODY_BLOCK_BYTES, HS_RESP_HEADER_ROOM: the held cases straddle them */
#include "http_fields.h"
#include "tg_time.h"

#define TAG_WAKE 1u            /* data.u64 of the loop's eventfd (below HS_TAG_LIMIT) */
#define LOOP_EVENTS 16         /* epoll_wait batch */
#define REQ_POOL_MAX 512       /* request records per scenario */
#define STREAM_POOL_MAX 64     /* streaming responses per scenario */
#define ACT_MAX 512            /* timed resumes pending on the loop thread */
#define XRES_MAX 128           /* timed resumes pending on the resumer thread */
#define WAIT_MS 5000u          /* longest wait for one response or one event */
#define GONE_MS 1000u          /* a closed client ends its suspended request within this */
#define IO_TIMEO_S 10          /* SO_RCVTIMEO / SO_SNDTIMEO backstop of the clients */
#define CL_BUF_MAX (16u << 20) /* a client keeps at most this many unread bytes */
#define HEAD_MAX 2048u         /* head_max_bytes of the test servers */
#define CHUNK_BYTES 16         /* one chunk of /stream: its size line is "10" */
#define BIG_BYTES (4u << 20)   /* the slow reader's body */
#define EARLY_BODY (2u << 20)  /* the body sent after an early 413 */
#define N_CONCURRENT 50        /* suspended requests at once */

/* ------------------------------------------------------------------------------ checks */

static unsigned n_checks;
static unsigned n_failed;

/* Print "ok N - what" or "not ok N - what"; count failures. */
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    char msg[1024];
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

static int begin(const char *scn)
{
    printf("# %s\n", scn);
    fflush(stdout);
    return (int)n_failed;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* b[0..n) as C-escaped text (CR, LF and other bytes visible), at most cap - 1 characters. */
static const char *esc(const char *b, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char ch = (unsigned char)b[i];

        if (ch == '\r')
            o += (size_t)snprintf(out + o, cap - o, "\\r");
        else if (ch == '\n')
            o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (ch == '"' || ch == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
        else
            out[o++] = (char)ch;
    }
    if (cap > 0)
        out[o < cap ? o : cap - 1] = '\0';
    return out;
}

/* The big bodies' bytes: position-dependent, so that a lost, doubled or reordered block shows. */
static unsigned char pat(size_t i)
{
    return (unsigned char)(i ^ (i >> 8) ^ (i >> 16) ^ 0x5a);
}

/* Offset of the first byte of b[0..n) that is not pat(off + i), or n. */
static size_t pat_mismatch(const char *b, size_t n, size_t off)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)b[i] != pat(off + i))
            return i;
    return n;
}

/* ------------------------------------------------------------------------ shared state */

/* One recursive lock for everything the loop thread and the main thread share: the handler
 * holds it while it calls into the server, which may call completed or a free function. */
static pthread_mutex_t mu;
static pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast on every recorded event */

static void cv_wait_until(uint64_t deadline_ms)
{
    uint64_t now = tg_now_mono_ms();
    struct timespec ts;

    if (now >= deadline_ms)
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)((deadline_ms - now) / 1000);
    ts.tv_nsec += (long)((deadline_ms - now) % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&cv, &mu, &ts);
}

#define REQ_MAGIC 0x68737271u

/* One request as the handler saw it. Records live until the next scenario starts. */
struct req {
    unsigned magic;
    int id;
    struct hs_conn *conn;
    char url[160];
    char path[64];
    char tag[48];
    char method[16];
    char version[16];
    char *body;
    size_t body_len, body_cap;
    int pieces;          /* body pieces */
    int finals;          /* calls with the body complete (step 3, and after every resume) */
    int suspends;        /* hs_suspend calls */
    _Atomic int resumes; /* hs_resume calls done by the test (loop or resumer thread) */
    int responded;
    int respond2;    /* /twice: the second hs_respond's return */
    int susp_calls;  /* handler calls while suspended (each one a violation) */
    int completed;   /* completed calls */
    enum hs_toe toe; /* the first completed call's */
    uint64_t t_completed;
};

/* A streaming response's state; its reader gets it as cls. */
struct stream {
    struct req *r;
    struct hs_conn *conn;
    struct hs_response *resp;
    char tag[48];
    int n, k, off;  /* chunks to send, chunks sent, bytes of chunk k sent */
    int gap_ms, xt; /* suspension between chunks: its length, resumed from the other thread */
    int fail_at;    /* >= 0: HS_READER_ERROR instead of chunk fail_at */
    int want_wait;  /* the next call suspends first */
    int big;        /* /bigstream: total bytes, as large pieces as the server takes */
    size_t total, sent;
    int calls, frees;
    int suspends;
    _Atomic int resumes;
};

static struct req reqs[REQ_POOL_MAX];
static int n_reqs;
static struct stream streams[STREAM_POOL_MAX];
static int n_streams;
static int n_completed_null; /* completed calls with *req_ctx NULL: no handler call before */
static int n_viol;           /* contract violations seen from the callbacks */
static char viol_first[512];
static _Atomic unsigned n_wakes; /* wake calls from the server */

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&mu);
    if (n_viol++ == 0)
        snprintf(viol_first, sizeof(viol_first), "%s", msg);
    pthread_mutex_unlock(&mu);
    printf("# contract violation: %s\n", msg);
    fflush(stdout);
}

/* ------------------------------------------------------------------- timed resumes */

/* Resumes due at a time, run by the loop thread (act) or by the resumer thread (xres). A
 * completed call or a free function cancels the ones of its request or stream, so that no
 * resume ever reaches a connection the server has let go of. */
struct act {
    int used;
    uint64_t due;
    struct req *r;
    struct stream *st;
    struct hs_conn *c;
};

static struct act acts[ACT_MAX]; /* under mu, loop thread */

static struct act xq[XRES_MAX]; /* under xmu */
static pthread_mutex_t xmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t xcv; /* CLOCK_MONOTONIC */
static int xstop;

/* 0, or -1 when the table is full (the caller reports it, outside xmu). */
static int act_add(struct act *tab, size_t cap, struct req *r, struct stream *st, struct hs_conn *c,
                   unsigned ms)
{
    for (size_t i = 0; i < cap; i++) {
        if (!tab[i].used) {
            tab[i] =
                (struct act){.used = 1, .due = tg_now_mono_ms() + ms, .r = r, .st = st, .c = c};
            return 0;
        }
    }
    return -1;
}

static void act_cancel(struct act *tab, size_t cap, const struct req *r, const struct stream *st)
{
    for (size_t i = 0; i < cap; i++) {
        if (tab[i].used && ((r != NULL && tab[i].r == r) || (st != NULL && tab[i].st == st)))
            tab[i].used = 0;
    }
}

/* Mark the resume done (before hs_resume: the handler checks it), then resume. */
static void act_fire(struct act *a)
{
    a->used = 0;
    if (a->st != NULL)
        atomic_fetch_add(&a->st->resumes, 1);
    else
        atomic_fetch_add(&a->r->resumes, 1);
    hs_resume(a->c);
}

/* Loop thread, under mu. */
static void acts_run_due(void)
{
    uint64_t now = tg_now_mono_ms();

    for (size_t i = 0; i < ACT_MAX; i++)
        if (acts[i].used && acts[i].due <= now)
            act_fire(&acts[i]);
}

/* Loop thread, under mu: ms until the next resume, -1 for none. */
static int acts_timeout_ms(void)
{
    uint64_t now = tg_now_mono_ms();
    int64_t best = -1;

    for (size_t i = 0; i < ACT_MAX; i++) {
        if (!acts[i].used)
            continue;
        int64_t d = acts[i].due > now ? (int64_t)(acts[i].due - now) : 0;

        if (best < 0 || d < best)
            best = d;
    }
    return (int)best;
}

static int xres_add(struct req *r, struct stream *st, struct hs_conn *c, unsigned ms)
{
    int rc;

    pthread_mutex_lock(&xmu);
    rc = act_add(xq, XRES_MAX, r, st, c, ms);
    pthread_cond_broadcast(&xcv);
    pthread_mutex_unlock(&xmu);
    return rc;
}

static void xres_cancel(const struct req *r, const struct stream *st)
{
    pthread_mutex_lock(&xmu);
    act_cancel(xq, XRES_MAX, r, st);
    pthread_mutex_unlock(&xmu);
}

/* The resumer thread: hs_resume from a thread that is not the loop's, under xmu, which
 * completed and the free function take first — the connection stays alive meanwhile, as the
 * contract asks of cross-thread callers. */
static void *xres_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&xmu);
    while (!xstop) {
        uint64_t now = tg_now_mono_ms();
        struct act *next = NULL;
        struct timespec ts;

        for (size_t i = 0; i < XRES_MAX; i++)
            if (xq[i].used && (next == NULL || xq[i].due < next->due))
                next = &xq[i];
        if (next != NULL && next->due <= now) {
            act_fire(next);
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t wait_ms = next != NULL ? next->due - now : 1000;

        ts.tv_sec += (time_t)(wait_ms / 1000);
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&xcv, &xmu, &ts);
    }
    pthread_mutex_unlock(&xmu);
    return NULL;
}

static void schedule_resume(struct req *r, struct stream *st, struct hs_conn *c, unsigned ms,
                            int xt)
{
    if ((xt ? xres_add(r, st, c, ms) : act_add(acts, ACT_MAX, r, st, c, ms)) != 0)
        violation("timed resume table full (test limit)");
}

/* ------------------------------------------------------------------------- the handler */

/* Query argument name as an int, or dflt when absent. */
static int qint(const struct hs_conn *c, const char *name, int dflt)
{
    const char *v = hs_query_arg(c, name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static struct req *req_new(struct hs_conn *c, const char *url, const char *method,
                           const char *version)
{
    struct req *r;
    const char *tag = hs_query_arg(c, "t");
    size_t pl = strcspn(url != NULL ? url : "", "?");

    if (n_reqs >= REQ_POOL_MAX) {
        violation("request pool full (test limit)");
        return NULL;
    }
    r = &reqs[n_reqs];
    memset(r, 0, sizeof(*r));
    atomic_init(&r->resumes, 0);
    r->magic = REQ_MAGIC;
    r->id = ++n_reqs;
    r->conn = c;
    snprintf(r->url, sizeof(r->url), "%s", url != NULL ? url : "(null)");
    snprintf(r->path, sizeof(r->path), "%.*s", (int)(pl < 63 ? pl : 63), url != NULL ? url : "");
    snprintf(r->tag, sizeof(r->tag), "%s", tag != NULL ? tag : "");
    snprintf(r->method, sizeof(r->method), "%s", method != NULL ? method : "(null)");
    snprintf(r->version, sizeof(r->version), "%s", version != NULL ? version : "(null)");
    return r;
}

struct kv {
    const char *k;
    const char *v;
};

/* Queue a buffer response (body taken, may be NULL with len 0) with x-tag and the headers. */
static void respond(struct req *r, struct hs_conn *c, int status, char *body, size_t len,
                    const struct kv *h, size_t nh)
{
    struct hs_response *resp = hs_response_buffer(body, len);
    int rc;

    if (resp == NULL) {
        violation("%s: hs_response_buffer returned NULL", r->tag);
        return;
    }
    if (hs_response_header(resp, "x-tag", r->tag) != 0)
        violation("%s: hs_response_header(x-tag) refused", r->tag);
    for (size_t i = 0; i < nh; i++)
        if (hs_response_header(resp, h[i].k, h[i].v) != 0)
            violation("%s: hs_response_header(%s) refused", r->tag, h[i].k);
    r->responded = 1;
    rc = hs_respond(c, status, resp);
    if (rc != HS_YES)
        violation("%s: hs_respond returned %d", r->tag, rc);
}

static char *dup_bytes(const char *b, size_t n)
{
    char *p = malloc(n > 0 ? n : 1);

    if (p != NULL && n > 0)
        memcpy(p, b, n);
    return p;
}

/* "[value]" or "(none)". */
static void bracket(char *out, size_t cap, const char *v)
{
    if (v == NULL)
        snprintf(out, cap, "(none)");
    else
        snprintf(out, cap, "[%s]", v);
}

static void respond_echo(struct req *r, struct hs_conn *c)
{
    char pieces[16], hb[24], finals[16], in[200], q[200], flag[200], none[200];
    struct kv h[10];
    size_t nh = 0;

    snprintf(pieces, sizeof(pieces), "%d", r->pieces);
    snprintf(hb, sizeof(hb), "%zu", hs_head_bytes(c));
    snprintf(finals, sizeof(finals), "%d", r->finals);
    bracket(in, sizeof(in), hs_header(c, "x-in"));
    bracket(q, sizeof(q), hs_query_arg(c, "q"));
    bracket(flag, sizeof(flag), hs_query_arg(c, "flag"));
    bracket(none, sizeof(none), hs_query_arg(c, "none"));
    h[nh++] = (struct kv){"x-pieces", pieces};
    h[nh++] = (struct kv){"x-method", r->method};
    h[nh++] = (struct kv){"x-version", r->version};
    h[nh++] = (struct kv){"x-in", in};
    h[nh++] = (struct kv){"x-q", q};
    h[nh++] = (struct kv){"x-flag", flag};
    h[nh++] = (struct kv){"x-none", none};
    h[nh++] = (struct kv){"x-head-bytes", hb};
    h[nh++] = (struct kv){"x-finals", finals};
    if (qint(c, "close", 0))
        h[nh++] = (struct kv){"Connection", "close"};
    respond(r, c, 200, r->body_len > 0 ? dup_bytes(r->body, r->body_len) : NULL, r->body_len, h,
            nh);
}

static ssize_t stream_read(void *cls, char *buf, size_t max);
static void stream_free(void *cls);

static void respond_stream(struct req *r, struct hs_conn *c, int big)
{
    struct stream *st;
    struct hs_response *resp;
    int rc;

    if (n_streams >= STREAM_POOL_MAX) {
        violation("stream pool full (test limit)");
        return;
    }
    st = &streams[n_streams++];
    memset(st, 0, sizeof(*st));
    atomic_init(&st->resumes, 0);
    st->r = r;
    st->conn = c;
    snprintf(st->tag, sizeof(st->tag), "%s", r->tag);
    st->n = qint(c, "n", 3);
    st->gap_ms = qint(c, "gap", 20);
    st->xt = qint(c, "xt", 0);
    st->fail_at = qint(c, "fail", -1);
    st->big = big;
    st->total = big ? (size_t)qint(c, "bytes", 0) : 0;
    resp = hs_response_reader(stream_read, st, stream_free);
    if (resp == NULL) {
        violation("%s: hs_response_reader returned NULL", r->tag);
        return;
    }
    st->resp = resp;
    if (hs_response_header(resp, "x-tag", r->tag) != 0)
        violation("%s: hs_response_header(x-tag) on a stream refused", r->tag);
    r->responded = 1;
    rc = hs_respond(c, 200, resp);
    if (rc != HS_YES)
        violation("%s: hs_respond(stream) returned %d", r->tag, rc);
}

/* Step 1: the head is in. */
static int on_head(struct req *r, struct hs_conn *c)
{
    if (strcmp(r->path, "/refuse") == 0) {
        const char *at = hs_query_arg(c, "at");

        return at != NULL && strcmp(at, "final") == 0 ? HS_YES : HS_NO;
    }
    if (strcmp(r->path, "/early") == 0) {
        static const char b[] = "too large\n";

        respond(r, c, 413, dup_bytes(b, sizeof(b) - 1), sizeof(b) - 1, NULL, 0);
        return HS_YES;
    }
    if (strcmp(r->path, "/echo") == 0 && qint(c, "spurious", 0))
        hs_resume(c); /* not suspended: must do nothing */
    if (strcmp(r->path, "/susphead") == 0) {
        /* suspended before the body: no body piece until the resume */
        hs_suspend(c);
        r->suspends++;
        schedule_resume(r, NULL, c, (unsigned)qint(c, "ms", 0), qint(c, "xt", 0));
    }
    return HS_YES;
}

/* Step 3 (the body is complete), and again after every resume. */
static int on_final(struct req *r, struct hs_conn *c)
{
    if (r->responded) {
        /* an early answer's body is dropped, so a call at its end is no news; any other call
         * after a response was queued breaks step 4 */
        if (strcmp(r->path, "/early") != 0)
            violation("%s: handler called again after its response was queued", r->tag);
        return HS_YES;
    }
    if (strcmp(r->path, "/refuse") == 0)
        return HS_NO;
    if (strcmp(r->path, "/echo") == 0 || strcmp(r->path, "/susphead") == 0) {
        respond_echo(r, c);
    } else if (strcmp(r->path, "/held") == 0) {
        /* as the router does for a request whose event waits for the end of the turn */
        hs_hold(c);
        respond_echo(r, c);
    } else if (strcmp(r->path, "/heldbig") == 0) {
        /* held, with a body of bytes= (a cached block up to HS_BODY_BLOCK_BYTES) and an
         * x-fill header of fill= bytes (a head over the header room is copied elsewhere) */
        size_t n = (size_t)qint(c, "bytes", 0);
        size_t fill = (size_t)qint(c, "fill", 0);
        char *b = malloc(n > 0 ? n : 1);
        char *f = malloc(fill + 1);
        struct kv h[1] = {{"x-fill", f}};

        for (size_t i = 0; b != NULL && i < n; i++)
            b[i] = (char)pat(i);
        if (f != NULL) {
            memset(f, 'f', fill);
            f[fill] = '\0';
        }
        if (qint(c, "hold", 1))
            hs_hold(c);
        respond(r, c, 200, b, n, h, fill > 0 && f != NULL ? 1 : 0);
        free(f);
    } else if (strcmp(r->path, "/heldstream") == 0) {
        hs_hold(c);
        respond_stream(r, c, 0);
    } else if (strcmp(r->path, "/wait") == 0) {
        if (r->suspends < qint(c, "times", 1)) {
            hs_suspend(c);
            r->suspends++;
            schedule_resume(r, NULL, c, (unsigned)qint(c, "ms", 0), qint(c, "xt", 0));
        } else {
            static const char b[] = "waited\n";
            char res[16];
            struct kv h[1] = {{"x-resumes", res}};

            snprintf(res, sizeof(res), "%d", atomic_load(&r->resumes));
            respond(r, c, 200, dup_bytes(b, sizeof(b) - 1), sizeof(b) - 1, h, 1);
        }
    } else if (strcmp(r->path, "/stream") == 0) {
        respond_stream(r, c, 0);
    } else if (strcmp(r->path, "/bigstream") == 0) {
        respond_stream(r, c, 1);
    } else if (strcmp(r->path, "/big") == 0) {
        size_t n = (size_t)qint(c, "bytes", 0);
        char *b = malloc(n > 0 ? n : 1);

        for (size_t i = 0; b != NULL && i < n; i++)
            b[i] = (char)pat(i);
        respond(r, c, 200, b, n, NULL, 0);
    } else if (strcmp(r->path, "/twice") == 0) {
        struct hs_response *second = hs_response_buffer(NULL, 0);

        respond(r, c, 200, dup_bytes("one\n", 4), 4, NULL, 0);
        r->respond2 = second != NULL ? hs_respond(c, 200, second) : -1;
    } else {
        static const char b[] = "no such path\n";

        respond(r, c, 404, dup_bytes(b, sizeof(b) - 1), sizeof(b) - 1, NULL, 0);
    }
    return HS_YES;
}

static int on_request(void *cls, struct hs_conn *c, const char *url, const char *method,
                      const char *version, const char *upload, size_t *upload_size, void **req_ctx)
{
    struct req *r = *req_ctx;
    int rc = HS_YES;

    (void)cls;
    pthread_mutex_lock(&mu);
    if (r == NULL) {
        r = req_new(c, url, method, version);
        if (r == NULL) {
            pthread_mutex_unlock(&mu);
            return HS_NO;
        }
        *req_ctx = r;
        if (upload != NULL || *upload_size != 0)
            violation("%s: first call with a body piece (%zu bytes)", r->tag, *upload_size);
        rc = on_head(r, c);
        goto out;
    }
    if (r < reqs || r >= reqs + REQ_POOL_MAX || r->magic != REQ_MAGIC) {
        violation("handler called with a req_ctx the handler never set (%p)", (void *)r);
        goto out;
    }
    if (r->completed > 0)
        violation("%s: handler called after completed", r->tag);
    if (r->conn != c)
        violation("%s: handler called with another connection", r->tag);
    if (atomic_load(&r->resumes) < r->suspends) {
        r->susp_calls++;
        violation("%s: handler called while suspended (%s)", r->tag,
                  upload != NULL ? "a body piece" : "the body-complete call");
    }
    if (upload != NULL) {
        if (*upload_size == 0)
            violation("%s: body piece of 0 bytes", r->tag);
        if (r->finals > 0)
            violation("%s: body piece after the body was complete", r->tag);
        if (r->body_len + *upload_size > r->body_cap) {
            size_t cap = (r->body_len + *upload_size) * 2;
            char *nb = realloc(r->body, cap);

            if (nb == NULL) {
                rc = HS_NO;
                goto out;
            }
            r->body = nb;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload, *upload_size);
        r->body_len += *upload_size;
        r->pieces++;
        *upload_size = 0; /* all taken, as the front does */
        goto out;
    }
    if (*upload_size != 0)
        violation("%s: upload NULL with *upload_size %zu", r->tag, *upload_size);
    r->finals++;
    rc = on_final(r, c);
out:
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return rc;
}

static void on_completed(void *cls, struct hs_conn *c, void **req_ctx, enum hs_toe toe)
{
    struct req *r = *req_ctx;

    (void)cls;
    pthread_mutex_lock(&mu);
    if (r == NULL) {
        n_completed_null++;
    } else if (r < reqs || r >= reqs + REQ_POOL_MAX || r->magic != REQ_MAGIC) {
        violation("completed with a req_ctx the handler never set (%p)", (void *)r);
    } else {
        if (r->completed++ == 0) {
            r->toe = toe;
            r->t_completed = tg_now_mono_ms();
        } else {
            violation("%s: completed called %d times (toe %d now)", r->tag, r->completed, (int)toe);
        }
        if (r->conn != c)
            violation("%s: completed with another connection", r->tag);
        act_cancel(acts, ACT_MAX, r, NULL);
        xres_cancel(r, NULL);
    }
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* The chunk k of the stream tagged tag: "<tag>#<k>" padded with dots to CHUNK_BYTES. */
static void chunk_of(const char *tag, int k, char *out)
{
    char c[40];

    memset(c, '.', sizeof(c));
    snprintf(c, sizeof(c), "%.8s#%d", tag, k);
    c[strlen(c)] = '.';
    memcpy(out, c, CHUNK_BYTES);
}

/* The stream reader: CHUNK_BYTES-byte chunks "<tag>#<k>" padded with dots, a suspension of
 * gap_ms before every chunk but the first (and before the end), then the x-chunks trailer and
 * the end. /bigstream: pat() bytes, as much as max allows, no suspension. */
static ssize_t stream_read(void *cls, char *buf, size_t max)
{
    struct stream *st = cls;
    ssize_t rc;

    pthread_mutex_lock(&mu);
    st->calls++;
    if (st->frees > 0)
        violation("%s: reader called after its free function", st->tag);
    if (atomic_load(&st->resumes) < st->suspends)
        violation("%s: reader called while suspended", st->tag);
    if (max == 0)
        violation("%s: reader called with max 0", st->tag);
    if (st->big) {
        size_t n = st->total - st->sent < max ? st->total - st->sent : max;

        if (n == 0) {
            rc = HS_READER_END;
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            buf[i] = (char)pat(st->sent + i);
        st->sent += n;
        rc = (ssize_t)n;
        goto out;
    }
    if (st->want_wait) {
        st->want_wait = 0;
        hs_suspend(st->conn);
        st->suspends++;
        schedule_resume(st->r, st, st->conn, (unsigned)st->gap_ms, st->xt);
        rc = 0;
        goto out;
    }
    if (st->fail_at >= 0 && st->k == st->fail_at) {
        rc = HS_READER_ERROR;
        goto out;
    }
    if (st->k >= st->n) {
        char v[16];

        snprintf(v, sizeof(v), "%d", st->n);
        if (hs_response_trailer(st->resp, "x-chunks", v) != 0)
            violation("%s: hs_response_trailer refused", st->tag);
        rc = HS_READER_END;
        goto out;
    }
    {
        char chunk[CHUNK_BYTES];
        size_t n;

        chunk_of(st->tag, st->k, chunk);
        n = (size_t)(CHUNK_BYTES - st->off) < max ? (size_t)(CHUNK_BYTES - st->off) : max;
        memcpy(buf, chunk + st->off, n);
        st->off += (int)n;
        if (st->off == CHUNK_BYTES) {
            st->off = 0;
            st->k++;
            st->want_wait = 1;
        }
        rc = (ssize_t)n;
    }
out:
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return rc;
}

static void stream_free(void *cls)
{
    struct stream *st = cls;

    pthread_mutex_lock(&mu);
    st->frees++;
    act_cancel(acts, ACT_MAX, NULL, st);
    xres_cancel(NULL, st);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* --------------------------------------------------------------------- the loop thread */

struct fx {
    int epfd;
    int evfd;
    struct hs_server *s; /* loop thread while it runs */
    uint16_t port;
    pthread_t loop;
    pthread_t xthr;
    int stop;                   /* under mu */
    void (*post_fn)(void *arg); /* a call for the loop thread, under mu */
    void *post_arg;
    int post_state;        /* 0 none, 1 posted, 2 done */
    uint64_t stray_events; /* server events after the server was destroyed */
};

static struct fx fx;

static void wake_loop(void *cls)
{
    uint64_t one = 1;
    ssize_t w;

    (void)cls;
    atomic_fetch_add(&n_wakes, 1);
    w = write(fx.evfd, &one, sizeof(one));
    (void)w;
}

static void *loop_main(void *arg)
{
    struct epoll_event evs[LOOP_EVENTS];

    (void)arg;
    for (;;) {
        int t = -1;
        int ta, n, stop;

        pthread_mutex_lock(&mu);
        if (fx.s != NULL)
            t = hs_server_timeout_ms(fx.s);
        ta = acts_timeout_ms();
        pthread_mutex_unlock(&mu);
        if (ta >= 0 && (t < 0 || ta < t))
            t = ta;
        n = epoll_wait(fx.epfd, evs, LOOP_EVENTS, t);
        tg_loop_tick(); /* as router-svc's loop: the server's timers read the turn's clock */
        if (n < 0 && errno != EINTR) {
            violation("epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 < HS_TAG_LIMIT) {
                uint64_t v;

                if (evs[i].data.u64 == TAG_WAKE && read(fx.evfd, &v, sizeof(v)) < 0 &&
                    errno != EAGAIN)
                    violation("eventfd read: %s", strerror(errno));
            } else if (fx.s != NULL) {
                hs_server_event(fx.s, &evs[i]);
            } else {
                fx.stray_events++;
            }
        }
        pthread_mutex_lock(&mu);
        if (fx.post_state == 1) {
            fx.post_fn(fx.post_arg);
            fx.post_state = 2;
            pthread_cond_broadcast(&cv);
        }
        stop = fx.stop;
        pthread_mutex_unlock(&mu);
        if (stop)
            break;
        if (fx.s != NULL)
            hs_server_housekeep(fx.s);
        for (;;) {
            pthread_mutex_lock(&mu);
            acts_run_due();
            pthread_mutex_unlock(&mu);
            if (fx.s == NULL || !hs_server_run(fx.s))
                break;
        }
    }
    return NULL;
}

/* Run fn(arg) on the loop thread and wait for it. */
static void fx_call(void (*fn)(void *), void *arg)
{
    uint64_t dl = tg_now_mono_ms() + WAIT_MS;

    pthread_mutex_lock(&mu);
    fx.post_fn = fn;
    fx.post_arg = arg;
    fx.post_state = 1;
    pthread_mutex_unlock(&mu);
    wake_loop(NULL);
    atomic_fetch_sub(&n_wakes, 1); /* not the server's */
    pthread_mutex_lock(&mu);
    while (fx.post_state != 2 && tg_now_mono_ms() < dl)
        cv_wait_until(dl);
    if (fx.post_state != 2)
        check(0, "the loop thread ran a posted call within %u ms", WAIT_MS);
    fx.post_state = 0;
    pthread_mutex_unlock(&mu);
}

static void do_stats(void *arg)
{
    if (fx.s != NULL)
        hs_server_stats(fx.s, arg);
}

static void do_quiesce(void *arg)
{
    (void)arg;
    hs_server_quiesce(fx.s);
}

static void do_destroy(void *arg)
{
    (void)arg;
    hs_server_destroy(&fx.s);
}

static void do_release(void *arg)
{
    *(int *)arg = hs_server_release(fx.s);
}

static void do_timeout(void *arg)
{
    *(int *)arg = hs_server_timeout_ms(fx.s);
}

static struct hs_stats stats_now(void)
{
    struct hs_stats st;

    memset(&st, 0, sizeof(st));
    fx_call(do_stats, &st);
    return st;
}

struct fx_opts {
    unsigned max_connections; /* 0: 1000 */
    unsigned header_timeout_ms, body_timeout_ms, body_min_rate, keepalive_timeout_ms,
        send_timeout_ms; /* 0: the server's defaults */
    struct hs_ipcap *ipcap;
};

static int fx_start(const struct fx_opts *o)
{
    struct hs_config cfg;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_WAKE};
    char err[256] = "";

    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_reqs; i++)
        free(reqs[i].body);
    n_reqs = 0;
    n_streams = 0;
    n_completed_null = 0;
    n_viol = 0;
    viol_first[0] = '\0';
    memset(acts, 0, sizeof(acts));
    pthread_mutex_unlock(&mu);
    memset(xq, 0, sizeof(xq));
    xstop = 0;
    memset(&fx, 0, sizeof(fx));
    fx.epfd = epoll_create1(EPOLL_CLOEXEC);
    fx.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fx.epfd < 0 || fx.evfd < 0 || epoll_ctl(fx.epfd, EPOLL_CTL_ADD, fx.evfd, &ev) != 0)
        return -1;
    memset(&cfg, 0, sizeof(cfg));
    cfg.epfd = fx.epfd;
    cfg.addr.sin_family = AF_INET;
    cfg.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cfg.addr.sin_port = 0;
    cfg.max_connections = o != NULL && o->max_connections > 0 ? o->max_connections : 1000;
    if (o != NULL) {
        cfg.header_timeout_ms = o->header_timeout_ms;
        cfg.body_timeout_ms = o->body_timeout_ms;
        cfg.body_min_rate = o->body_min_rate;
        cfg.keepalive_timeout_ms = o->keepalive_timeout_ms;
        cfg.send_timeout_ms = o->send_timeout_ms;
        cfg.ipcap = o->ipcap;
    }
    cfg.head_max_bytes = HEAD_MAX;
    cfg.handler = on_request;
    cfg.completed = on_completed;
    cfg.wake = wake_loop;
    fx.s = hs_server_create(&cfg, err, sizeof(err));
    check(fx.s != NULL, "hs_server_create on 127.0.0.1:0 (%s)", fx.s != NULL ? "ok" : err);
    if (fx.s == NULL)
        return -1;
    fx.port = hs_server_port(fx.s);
    check(fx.port != 0, "hs_server_port gives the kernel's port (%u)", fx.port);
    if (pthread_create(&fx.loop, NULL, loop_main, NULL) != 0 ||
        pthread_create(&fx.xthr, NULL, xres_main, NULL) != 0)
        return -1;
    return 0;
}

/* Stop the loop, destroy the server from this thread (the loop has stopped), and check the
 * scenario's accounting: one completed per request, one free per stream, no violation. */
static void fx_stop(void)
{
    int bad_done = 0, bad_free = 0, pending = 0;
    char first[256] = "";

    pthread_mutex_lock(&mu);
    fx.stop = 1;
    pthread_mutex_unlock(&mu);
    wake_loop(NULL);
    atomic_fetch_sub(&n_wakes, 1);
    pthread_join(fx.loop, NULL);
    pthread_mutex_lock(&xmu);
    xstop = 1;
    pthread_cond_broadcast(&xcv);
    pthread_mutex_unlock(&xmu);
    pthread_join(fx.xthr, NULL);
    hs_server_destroy(&fx.s);
    check(fx.s == NULL, "hs_server_destroy sets the pointer to NULL");
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_reqs; i++) {
        if (reqs[i].completed != 1) {
            if (bad_done++ == 0)
                snprintf(first, sizeof(first), "%s %s (tag %s): %d completed calls", reqs[i].method,
                         reqs[i].url, reqs[i].tag, reqs[i].completed);
        }
    }
    for (int i = 0; i < n_streams; i++)
        if (streams[i].frees != 1)
            bad_free++;
    for (size_t i = 0; i < ACT_MAX; i++)
        pending += acts[i].used;
    for (size_t i = 0; i < XRES_MAX; i++)
        pending += xq[i].used;
    check(bad_done == 0,
          "every request whose handler was called got exactly one completed "
          "(%d requests, %d wrong%s%s)",
          n_reqs, bad_done, bad_done ? ": " : "", first);
    check(bad_free == 0, "every stream's free function ran exactly once (%d streams, %d wrong)",
          n_streams, bad_free);
    check(n_completed_null == 0,
          "completed was never called for a request the handler had not seen (%d calls)",
          n_completed_null);
    check(n_viol == 0, "no contract violation seen by the callbacks (%d%s%s)", n_viol,
          n_viol ? "; first: " : "", viol_first);
    check(fx.stray_events == 0, "no server event after the server was destroyed (%llu)",
          (unsigned long long)fx.stray_events);
    check(pending == 0, "no resume left pending (%d)", pending);
    pthread_mutex_unlock(&mu);
    close(fx.evfd);
    close(fx.epfd);
}

/* ------------------------------------------------------------ request records, waits */

struct rsnap {
    int found;
    int suspended; /* the request or its stream, now */
    int completed;
    enum hs_toe toe;
    int pieces, finals, suspends, resumes, respond2, susp_calls;
    uint64_t t_completed;
    char body[256];
    size_t body_len;
};

static struct req *req_by_tag(const char *tag)
{
    for (int i = 0; i < n_reqs; i++)
        if (strcmp(reqs[i].tag, tag) == 0)
            return &reqs[i];
    return NULL;
}

static struct stream *stream_by_tag(const char *tag)
{
    for (int i = 0; i < n_streams; i++)
        if (strcmp(streams[i].tag, tag) == 0)
            return &streams[i];
    return NULL;
}

/* The request, or the stream it answers with, is suspended now (no resume done since). */
static int suspended_now(const struct req *r)
{
    const struct stream *st = stream_by_tag(r->tag);

    return atomic_load(&r->resumes) < r->suspends ||
           (st != NULL && atomic_load(&st->resumes) < st->suspends);
}

enum until { U_SEEN, U_SUSPENDED, U_DONE };

/* Wait (up to ms) until the request tagged tag is seen / suspended / completed; its state. */
static struct rsnap req_wait(const char *tag, enum until u, unsigned ms)
{
    uint64_t dl = tg_now_mono_ms() + ms;
    struct rsnap s;

    memset(&s, 0, sizeof(s));
    pthread_mutex_lock(&mu);
    for (;;) {
        struct req *r = req_by_tag(tag);
        int ok = r != NULL && (u == U_SEEN || (u == U_SUSPENDED && suspended_now(r)) ||
                               (u == U_DONE && r->completed > 0));

        if (ok || tg_now_mono_ms() >= dl) {
            if (r != NULL) {
                s.found = 1;
                s.suspended = suspended_now(r);
                s.completed = r->completed;
                s.toe = r->toe;
                s.pieces = r->pieces;
                s.finals = r->finals;
                s.suspends = r->suspends;
                s.resumes = atomic_load(&r->resumes);
                s.respond2 = r->respond2;
                s.susp_calls = r->susp_calls;
                s.t_completed = r->t_completed;
                s.body_len = r->body_len;
                snprintf(s.body, sizeof(s.body), "%.*s",
                         (int)(r->body_len < 255 ? r->body_len : 255),
                         r->body != NULL ? r->body : "");
            }
            break;
        }
        cv_wait_until(dl);
    }
    pthread_mutex_unlock(&mu);
    return s;
}

/* Wait (up to ms) until the stream tagged tag has been freed; its free count (-1: no stream). */
static int stream_frees(const char *tag, unsigned ms)
{
    uint64_t dl = tg_now_mono_ms() + ms;
    int f = -1;

    pthread_mutex_lock(&mu);
    for (;;) {
        struct stream *st = stream_by_tag(tag);

        f = st != NULL ? st->frees : -1;
        if (f > 0 || tg_now_mono_ms() >= dl)
            break;
        cv_wait_until(dl);
    }
    pthread_mutex_unlock(&mu);
    return f;
}

static const char *toe_name(enum hs_toe t)
{
    switch (t) {
    case HS_TOE_OK:
        return "OK";
    case HS_TOE_CLIENT_GONE:
        return "CLIENT_GONE";
    case HS_TOE_ERROR:
        return "ERROR";
    case HS_TOE_TIMEOUT:
        return "TIMEOUT";
    case HS_TOE_SHUTDOWN:
        return "SHUTDOWN";
    }
    return "?";
}

/* The request tagged tag completed (within ms) once, with toe. */
static struct rsnap expect_done(const char *tag, enum hs_toe toe, unsigned ms)
{
    struct rsnap s = req_wait(tag, U_DONE, ms);

    check(s.found && s.completed == 1 && s.toe == toe,
          "%s: completed once with HS_TOE_%s (%s, %d calls, toe %s)", tag, toe_name(toe),
          s.found ? "handler called" : "handler never called", s.completed,
          s.completed ? toe_name(s.toe) : "-");
    return s;
}

/* ------------------------------------------------------------------------- the clients */

struct bytes {
    char *p;
    size_t n, cap;
};

static void bytes_add(struct bytes *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *np = realloc(b->p, cap);

        assert_non_null(np);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

struct cl {
    int fd;
    char *buf; /* received, not consumed */
    size_t len, cap;
    int reset;        /* the last read saw ECONNRESET */
    size_t piece;     /* > 0: read at most this much at a time (a slow reader) */
    unsigned slow_us; /* sleep before every read */
};

static int cl_open(struct cl *c, uint16_t port, int rcvbuf)
{
    struct sockaddr_in a;
    struct timeval tv = {.tv_sec = IO_TIMEO_S, .tv_usec = 0};
    int one = 1;

    memset(c, 0, sizeof(*c));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int e = errno;

        close(c->fd);
        c->fd = -1;
        errno = e;
        return -1;
    }
    return 0;
}

static void cl_close(struct cl *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

/* Close with a reset (SO_LINGER 0). */
static void cl_reset(struct cl *c)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    cl_close(c);
}

static int cl_send(struct cl *c, const void *b, size_t n)
{
    const char *p = b;

    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cl_sends(struct cl *c, const char *s)
{
    return cl_send(c, s, strlen(s));
}

/* Send s one byte per write, gap_us apart. */
static int cl_send_bytewise(struct cl *c, const char *s, size_t n, unsigned gap_us)
{
    for (size_t i = 0; i < n; i++) {
        if (cl_send(c, s + i, 1) != 0)
            return -1;
        usleep(gap_us);
    }
    return 0;
}

/* Send s one byte every gap_ms until it is all sent, a send fails, or the server sent
 * something (or closed): a client that dribbles until it is answered. */
static void cl_dribble(struct cl *c, const char *s, size_t n, int gap_ms)
{
    for (size_t i = 0; i < n; i++) {
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};

        if (cl_send(c, s + i, 1) != 0)
            return;
        if (poll(&pf, 1, gap_ms) > 0)
            return;
    }
}

/* One read into the buffer, waiting until deadline: 1 bytes came, 0 end of stream (orderly or
 * reset), -1 the deadline passed. */
static int cl_fill(struct cl *c, uint64_t deadline)
{
    for (;;) {
        uint64_t now = tg_now_mono_ms();
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        size_t room;
        ssize_t n;

        if (now >= deadline)
            return -1;
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        if (c->cap - c->len < 65536) {
            size_t cap = c->cap < 65536 ? 131072 : c->cap * 2;
            char *nb;

            if (cap > CL_BUF_MAX + 65536)
                return 0;
            nb = realloc(c->buf, cap);
            assert_non_null(nb);
            c->buf = nb;
            c->cap = cap;
        }
        room = c->cap - c->len;
        if (c->piece > 0 && room > c->piece)
            room = c->piece;
        if (c->slow_us > 0)
            usleep(c->slow_us);
        n = recv(c->fd, c->buf + c->len, room, 0);
        if (n > 0) {
            c->len += (size_t)n;
            return 1;
        }
        if (n == 0)
            return 0;
        if (errno == EINTR || errno == EAGAIN)
            continue;
        c->reset = errno == ECONNRESET;
        return 0;
    }
}

static void cl_consume(struct cl *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* Wait until the server closes: 1 closed (orderly or reset), 0 still open at the deadline.
 * *extra: bytes that came before the end (buffered ones included), dropped. */
static int cl_wait_closed(struct cl *c, unsigned ms, size_t *extra)
{
    uint64_t dl = tg_now_mono_ms() + ms;
    int rc;

    *extra = c->len;
    c->len = 0;
    while ((rc = cl_fill(c, dl)) == 1) {
        *extra += c->len;
        c->len = 0;
    }
    return rc == 0;
}

/* No byte arrives within ms (and none is buffered). */
static int cl_quiet(struct cl *c, unsigned ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};

    return c->len == 0 && poll(&p, 1, (int)ms) == 0;
}

struct resp {
    char status_line[256];
    int status;
    struct bytes head; /* status line and header lines, through the blank line */
    struct bytes body; /* decoded */
    struct bytes raw;  /* the body as on the wire (chunk framing included) */
    int framing;       /* 0 none, 1 Content-Length, 2 chunked, 3 until the close */
    int nchunks;
    char trailers[1024]; /* trailer lines, each with its CRLF */
    char err[600];
};

static void resp_free(struct resp *r)
{
    free(r->head.p);
    free(r->body.p);
    free(r->raw.p);
    memset(r, 0, sizeof(*r));
}

/* Count of header lines called name; the first one's value (trimmed) into val. */
static int resp_header(const struct resp *r, const char *name, char *val, size_t cap)
{
    /* the lines after the status line */
    const char *p = r->head.p != NULL ? strstr(r->head.p, "\r\n") : NULL;

    return http_field_lookup(p != NULL ? p + 2 : NULL, name, val, cap);
}

/* A line ending in CRLF at the head of the buffer: its length without the CRLF, -1 on end. */
static long cl_line(struct cl *c, uint64_t dl, struct resp *r, const char *what)
{
    for (;;) {
        char *e = memmem(c->buf, c->len, "\r\n", 2);
        char shown[200];
        int rc;

        if (e != NULL)
            return e - c->buf;
        if (c->len > 4096) {
            snprintf(r->err, sizeof(r->err), "%s line over 4 KiB: \"%s\"", what,
                     esc(c->buf, c->len, shown, sizeof(shown)));
            return -1;
        }
        rc = cl_fill(c, dl);
        if (rc <= 0) {
            snprintf(r->err, sizeof(r->err), "%s in the %s line (%zu bytes: \"%s\")",
                     rc < 0 ? "timeout" : "end of stream", what, c->len,
                     esc(c->buf, c->len, shown, sizeof(shown)));
            return -1;
        }
    }
}

/* Read one response: 0, or -1 with r->err. no_body: the answer to a HEAD. */
static int cl_read_resp(struct cl *c, struct resp *r, int no_body, unsigned ms)
{
    uint64_t dl = tg_now_mono_ms() + ms;
    char val[64], shown[300];
    size_t hl;
    char *e;

    memset(r, 0, sizeof(*r));
    for (;;) {
        int rc;

        e = c->len > 0 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
        if (e != NULL)
            break;
        rc = cl_fill(c, dl);
        if (rc <= 0) {
            snprintf(r->err, sizeof(r->err), "%s before the end of the head (%zu bytes: \"%s\")",
                     rc < 0     ? "timeout"
                     : c->reset ? "reset"
                                : "end of stream",
                     c->len, esc(c->buf, c->len, shown, sizeof(shown)));
            return -1;
        }
    }
    hl = (size_t)(e - c->buf) + 4;
    bytes_add(&r->head, c->buf, hl);
    cl_consume(c, hl);
    snprintf(r->status_line, sizeof(r->status_line), "%.*s",
             (int)(strstr(r->head.p, "\r\n") - r->head.p), r->head.p);
    if (strncmp(r->status_line, "HTTP/1.", 7) == 0 && strlen(r->status_line) >= 12)
        r->status = atoi(r->status_line + 9);
    if (no_body || (r->status >= 100 && r->status < 200) || r->status == 204 || r->status == 304)
        return 0;
    if (resp_header(r, "Transfer-Encoding", val, sizeof(val)) > 0) {
        if (strcasecmp(val, "chunked") != 0) {
            snprintf(r->err, sizeof(r->err), "Transfer-Encoding \"%s\"", val);
            return -1;
        }
        r->framing = 2;
        for (;;) {
            long ll = cl_line(c, dl, r, "chunk-size");
            size_t size = 0;
            long i;

            if (ll < 0)
                return -1;
            for (i = 0; i < ll && c->buf[i] != ';'; i++) {
                char ch = c->buf[i];
                int d = ch >= '0' && ch <= '9'   ? ch - '0'
                        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                        : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                                 : -1;

                if (d < 0 || size > (SIZE_MAX >> 4)) {
                    snprintf(r->err, sizeof(r->err), "bad chunk-size line \"%s\"",
                             esc(c->buf, (size_t)ll, shown, sizeof(shown)));
                    return -1;
                }
                size = size * 16 + (size_t)d;
            }
            if (i == 0) {
                snprintf(r->err, sizeof(r->err), "empty chunk size in \"%s\"",
                         esc(c->buf, (size_t)ll, shown, sizeof(shown)));
                return -1;
            }
            bytes_add(&r->raw, c->buf, (size_t)ll + 2);
            cl_consume(c, (size_t)ll + 2);
            if (size == 0)
                break;
            while (c->len < size + 2) {
                int rc = cl_fill(c, dl);

                if (rc <= 0) {
                    snprintf(r->err, sizeof(r->err), "%s inside chunk %d (%zu of %zu bytes)",
                             rc < 0 ? "timeout" : "end of stream", r->nchunks, c->len, size + 2);
                    return -1;
                }
            }
            if (c->buf[size] != '\r' || c->buf[size + 1] != '\n') {
                snprintf(r->err, sizeof(r->err), "chunk %d (%zu bytes) not followed by CRLF",
                         r->nchunks, size);
                return -1;
            }
            bytes_add(&r->raw, c->buf, size + 2);
            bytes_add(&r->body, c->buf, size);
            cl_consume(c, size + 2);
            r->nchunks++;
        }
        for (;;) {
            long ll = cl_line(c, dl, r, "trailer");

            if (ll < 0)
                return -1;
            bytes_add(&r->raw, c->buf, (size_t)ll + 2);
            if (ll == 0) {
                cl_consume(c, 2);
                return 0;
            }
            if (strlen(r->trailers) + (size_t)ll + 3 < sizeof(r->trailers))
                strncat(r->trailers, c->buf, (size_t)ll + 2);
            cl_consume(c, (size_t)ll + 2);
        }
    }
    if (resp_header(r, "Content-Length", val, sizeof(val)) > 0) {
        size_t n = (size_t)strtoull(val, NULL, 10);

        r->framing = 1;
        while (c->len < n) {
            int rc = cl_fill(c, dl);

            if (rc <= 0) {
                snprintf(r->err, sizeof(r->err), "%s after %zu of %zu body bytes",
                         rc < 0 ? "timeout" : "end of stream", c->len, n);
                return -1;
            }
        }
        bytes_add(&r->body, c->buf, n);
        bytes_add(&r->raw, c->buf, n);
        cl_consume(c, n);
        return 0;
    }
    r->framing = 3;
    for (;;) {
        int rc = cl_fill(c, dl);

        if (rc < 0) {
            snprintf(r->err, sizeof(r->err), "timeout before the end of a close-delimited body");
            return -1;
        }
        if (rc == 0)
            break;
    }
    bytes_add(&r->body, c->buf != NULL ? c->buf : "", c->len);
    bytes_add(&r->raw, c->buf != NULL ? c->buf : "", c->len);
    cl_consume(c, c->len);
    return 0;
}

/* ------------------------------------------------------------------------ expectations */

/* The response was read and its status line is exactly sl. */
static void expect_status(const char *what, const struct resp *r, int rc, const char *sl)
{
    if (rc != 0)
        check(0, "%s: \"%s\" (read failed: %s)", what, sl, r->err);
    else
        check(strcmp(r->status_line, sl) == 0, "%s: status line \"%s\" (got \"%s\")", what, sl,
              r->status_line);
}

/* The header name appears exactly once, with exactly this value. */
static void expect_header(const char *what, const struct resp *r, const char *name,
                          const char *value)
{
    char v[512];
    int n = resp_header(r, name, v, sizeof(v));

    check(n == 1 && strcmp(v, value) == 0, "%s: header %s: \"%s\" (%d found, first \"%s\")", what,
          name, value, n, v);
}

static void expect_no_header(const char *what, const struct resp *r, const char *name)
{
    char v[512];
    int n = resp_header(r, name, v, sizeof(v));

    check(n == 0, "%s: no %s header (%d found, first \"%s\")", what, name, n, v);
}

/* Body bytes exactly b[0..n); Content-Length framing with the right value, no TE. */
static void expect_cl_body(const char *what, const struct resp *r, const char *b, size_t n)
{
    char cl[32], want[32], got_s[200], want_s[200];
    int ncl = resp_header(r, "Content-Length", cl, sizeof(cl));

    snprintf(want, sizeof(want), "%zu", n);
    check(r->framing == 1 && ncl == 1 && strcmp(cl, want) == 0 &&
              resp_header(r, "Transfer-Encoding", NULL, 0) == 0,
          "%s: one Content-Length: %s, no Transfer-Encoding (framing %d, %d CL, \"%s\")", what,
          want, r->framing, ncl, cl);
    check(r->body.n == n && (n == 0 || memcmp(r->body.p, b, n) == 0),
          "%s: body \"%s\" (got %zu bytes \"%s\")", what, esc(b, n, want_s, sizeof(want_s)),
          r->body.n, esc(r->body.p != NULL ? r->body.p : "", r->body.n, got_s, sizeof(got_s)));
}

static void expect_closed(const char *what, struct cl *c, unsigned ms)
{
    size_t extra = 0;
    int closed = cl_wait_closed(c, ms, &extra);

    check(closed && extra == 0,
          "%s: the server closes the connection, no more bytes (%s, %zu "
          "extra bytes)",
          what, closed ? (c->reset ? "reset" : "closed") : "still open", extra);
}

/* The raw wire bytes of a chunked body are exactly the n chunks of stream tag and the
 * trailer "x-chunks: n". */
static void expect_stream_raw(const char *what, const struct resp *r, const char *tag, int n)
{
    struct bytes want = {0};
    char line[64], c[CHUNK_BYTES], a[400], b[400];

    for (int k = 0; k < n; k++) {
        snprintf(line, sizeof(line), "%x\r\n", CHUNK_BYTES);
        bytes_add(&want, line, strlen(line));
        chunk_of(tag, k, c);
        bytes_add(&want, c, CHUNK_BYTES);
        bytes_add(&want, "\r\n", 2);
    }
    snprintf(line, sizeof(line), "0\r\nx-chunks: %d\r\n\r\n", n);
    bytes_add(&want, line, strlen(line));
    check(r->framing == 2 && r->raw.n == want.n && memcmp(r->raw.p, want.p, want.n) == 0,
          "%s: chunked body on the wire exactly \"%s\" (got %zu bytes \"%s\")", what,
          esc(want.p, want.n, a, sizeof(a)), r->raw.n,
          esc(r->raw.p != NULL ? r->raw.p : "", r->raw.n, b, sizeof(b)));
    free(want.p);
}

/* The unchunked body of stream tag (HTTP/1.0: data only). */
static void expect_stream_plain(const char *what, const struct resp *r, const char *tag, int n)
{
    struct bytes want = {0};
    char c[CHUNK_BYTES], a[400], b[400];

    for (int k = 0; k < n; k++) {
        chunk_of(tag, k, c);
        bytes_add(&want, c, CHUNK_BYTES);
    }
    check(r->framing == 3 && r->body.n == want.n && memcmp(r->body.p, want.p, want.n) == 0,
          "%s: unchunked body until the close exactly \"%s\" (framing %d, got %zu bytes \"%s\")",
          what, esc(want.p, want.n, a, sizeof(a)), r->framing, r->body.n,
          esc(r->body.p != NULL ? r->body.p : "", r->body.n, b, sizeof(b)));
    free(want.p);
}

/* Open a client on the test server; a failed connect is a failed check. */
static void open_cl(struct cl *c, int rcvbuf)
{
    int rc = cl_open(c, fx.port, rcvbuf);

    if (rc != 0)
        check(0, "connect to 127.0.0.1:%u (%s)", fx.port, strerror(errno));
}

/* One request on c, its response read (HEAD when no_body). */
static int roundtrip(struct cl *c, const char *req, struct resp *r, int no_body)
{
    if (cl_sends(c, req) != 0) {
        int e = errno;

        memset(r, 0, sizeof(*r));
        snprintf(r->err, sizeof(r->err), "send: %s", strerror(e));
        return -1;
    }
    return cl_read_resp(c, r, no_body, WAIT_MS);
}

/* -------------------------------------------------------------------- scenario 0: API */

static int api_frees;

static ssize_t never_read(void *cls, char *buf, size_t max)
{
    (void)cls;
    (void)buf;
    (void)max;
    return HS_READER_ERROR;
}

static void count_free(void *cls)
{
    (*(int *)cls)++;
}

/* 0. Responses without a server: the reserved headers are refused, the header room (2 KiB) and
 * the trailer room (512 bytes) end, a reader response never queued has its free function run
 * once by hs_response_free. */
static void test_response_api(void **state)
{
    int f0 = begin("0 response objects: reserved headers, header and trailer room");
    struct hs_response *r = hs_response_buffer(dup_bytes("abc", 3), 3);
    size_t used = 0;
    int refused_at = -1;
    char name[32], value[80];

    (void)state;
    check(r != NULL, "hs_response_buffer(3 bytes) gives a response");
    assert_non_null(r);
    check(hs_response_header(r, "Content-Length", "3") == -1, "Content-Length refused");
    check(hs_response_header(r, "content-length", "3") == -1, "content-length refused");
    check(hs_response_header(r, "Transfer-Encoding", "chunked") == -1, "Transfer-Encoding refused");
    check(hs_response_header(r, "Date", "Thu, 01 Jan 1970 00:00:00 GMT") == -1, "Date refused");
    check(hs_response_header(r, "x-ok", "1") == 0, "x-ok: 1 accepted");
    used = strlen("x-ok: 1\r\n");
    memset(value, 'v', 64);
    value[64] = '\0';
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof(name), "x-fill-%02d", i);
        if (hs_response_header(r, name, value) != 0) {
            refused_at = i;
            break;
        }
        used += strlen(name) + 2 + 64 + 2;
    }
    check(refused_at > 0 && used >= 1024 && used <= 2048,
          "the header room ends near 2 KiB (refused after %zu bytes of header lines)", used);
    hs_response_free(r);

    r = hs_response_buffer(NULL, 0);
    check(r != NULL, "hs_response_buffer(NULL, 0) gives a response");
    if (r != NULL)
        hs_response_free(r);

    api_frees = 0;
    r = hs_response_reader(never_read, &api_frees, count_free);
    check(r != NULL, "hs_response_reader gives a response");
    assert_non_null(r);
    check(hs_response_header(r, "Content-Length", "3") == -1, "Content-Length refused on a stream");
    used = 0;
    refused_at = -1;
    memset(value, 't', 40);
    value[40] = '\0';
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof(name), "x-t-%02d", i);
        if (hs_response_trailer(r, name, value) != 0) {
            refused_at = i;
            break;
        }
        used += strlen(name) + 2 + 40 + 2;
    }
    check(refused_at > 0 && used >= 256 && used <= 512,
          "the trailer room ends near 512 bytes (refused after %zu bytes of trailer lines)", used);
    check(api_frees == 0, "the free function has not run before hs_response_free");
    hs_response_free(r);
    check(api_frees == 1,
          "hs_response_free of an unqueued stream runs its free function once "
          "(%d)",
          api_frees);
    assert_int_equal(n_failed, f0);
}

/* ----------------------------------------------------------------- scenario 1: basics */

/* 1. GET with query arguments and a header; POST with a Content-Length body in one write, in
 * three writes 60 ms apart, and one byte per write; an unknown path. */
static void test_basic(void **state)
{
    int f0 = begin("1 GET, POST in one write, in pieces, byte by byte");
    static const char get[] = "GET /echo?t=g1&q=a%20b+c%2B&flag HTTP/1.1\r\n"
                              "Host: test\r\n"
                              "x-inn: a longer name\r\n"
                              "Y-In: another first letter\r\n"
                              "X-In:   hello world  \r\n"
                              "x-in: second\r\n"
                              "\r\n";
    static const char post[] = "POST /echo?t=p1 HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n"
                               "\r\nhello world";
    static const char head3[] = "POST /echo?t=p2 HTTP/1.1\r\nHost: test\r\nContent-Length: 28\r\n"
                                "\r\n";
    static const char *parts[3] = {"part-one|", "part-two|", "part-three"};
    static const char bytewise[] = "PUT /echo?t=p3 HTTP/1.1\r\nHost: test\r\nX-In: b\r\n"
                                   "Content-Length: 40\r\n\r\n"
                                   "0123456789abcdefghijklmnopqrstuvwxyzABCD";
    struct cl c, c2;
    struct resp r;
    struct rsnap s;
    char hb[32], hb2[32], v[64];
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);

    rc = roundtrip(&c, get, &r, 0);
    expect_status("GET", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("GET", &r, "", 0);
    expect_header("GET", &r, "x-tag", "g1");
    expect_header("GET", &r, "x-method", "GET");
    expect_header("GET", &r, "x-version", "HTTP/1.1");
    expect_header("GET", &r, "x-in", "[hello world]");
    expect_header("GET", &r, "x-q", "[a b c+]");
    expect_header("GET", &r, "x-flag", "[]");
    expect_header("GET", &r, "x-none", "(none)");
    expect_header("GET", &r, "x-pieces", "0");
    expect_header("GET", &r, "x-finals", "1");
    resp_header(&r, "Connection", v, sizeof(v));
    check(strcasecmp(v, "close") != 0, "GET: the connection is kept (Connection: \"%s\")", v);
    snprintf(hb, sizeof(hb), "%zu", strlen(get));
    snprintf(hb2, sizeof(hb2), "%zu", strlen(get) - 2);
    resp_header(&r, "x-head-bytes", v, sizeof(v));
    check(strcmp(v, hb) == 0 || strcmp(v, hb2) == 0,
          "GET: hs_head_bytes is the head's size, %s (or %s without the blank line) (got %s)", hb,
          hb2, v);
    resp_free(&r);
    expect_done("g1", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c, post, &r, 0);
    expect_status("POST in one write", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("POST in one write", &r, "hello world", 11);
    expect_header("POST in one write", &r, "x-method", "POST");
    expect_header("POST in one write", &r, "x-in", "(none)");
    resp_free(&r);
    expect_done("p1", HS_TOE_OK, WAIT_MS);

    cl_sends(&c, head3);
    for (int i = 0; i < 3; i++) {
        usleep(60000);
        cl_sends(&c, parts[i]);
    }
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("POST in three writes", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("POST in three writes", &r, "part-one|part-two|part-three", 28);
    resp_header(&r, "x-pieces", v, sizeof(v));
    check(atoi(v) >= 2, "POST in three writes 60 ms apart: the body came in pieces (x-pieces %s)",
          v);
    resp_free(&r);
    s = expect_done("p2", HS_TOE_OK, WAIT_MS);
    check(s.finals == 1, "p2: one call with the body complete (%d)", s.finals);

    open_cl(&c2, 0);
    cl_send_bytewise(&c2, bytewise, strlen(bytewise), 1000);
    rc = cl_read_resp(&c2, &r, 0, WAIT_MS);
    expect_status("PUT byte by byte", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("PUT byte by byte", &r, "0123456789abcdefghijklmnopqrstuvwxyzABCD", 40);
    expect_header("PUT byte by byte", &r, "x-method", "PUT");
    expect_header("PUT byte by byte", &r, "x-in", "[b]");
    resp_header(&r, "x-pieces", v, sizeof(v));
    check(atoi(v) > 1, "PUT byte by byte: the body came in pieces (x-pieces %s)", v);
    resp_free(&r);
    expect_done("p3", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c2, "GET /nope?t=n1 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("unknown path", &r, rc, "HTTP/1.1 404 Not Found");
    expect_cl_body("unknown path", &r, "no such path\n", 13);
    resp_free(&r);
    expect_done("n1", HS_TOE_OK, WAIT_MS);
    cl_close(&c);
    cl_close(&c2);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* --------------------------------------------------------- scenario 2: chunked request */

/* 2. Chunked request bodies: extensions, upper- and lower-case hex, trailers, sent whole and one
 * byte per write; an empty one; a request after each on the same connection. */
static void test_chunked_request(void **state)
{
    int f0 = begin("2 chunked request bodies");
    static const char body[] = "5;name=val\r\nhello\r\n"
                               "1\r\n \r\n"
                               "A\r\n0123456789\r\n"
                               "a;x;y=\"q\"\r\nabcdefghij\r\n"
                               "0\r\nX-Trailer: t1\r\nX-Other: t2\r\n\r\n";
    static const char want[] = "hello 0123456789abcdefghij";
    char req[512];
    struct cl c;
    struct resp r;
    char v[32];
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);

    snprintf(req, sizeof(req),
             "POST /echo?t=c1 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n%s",
             body);
    rc = roundtrip(&c, req, &r, 0);
    expect_status("chunked in one write", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("chunked in one write", &r, want, strlen(want));
    resp_free(&r);
    expect_done("c1", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c, "GET /echo?t=c2 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("a GET after the chunked body and its trailers", &r, rc, "HTTP/1.1 200 OK");
    expect_header("a GET after the chunked body and its trailers", &r, "x-tag", "c2");
    resp_free(&r);

    snprintf(req, sizeof(req),
             "POST /echo?t=c3 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n%s",
             body);
    cl_send_bytewise(&c, req, strlen(req), 500);
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("chunked byte by byte", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("chunked byte by byte", &r, want, strlen(want));
    resp_header(&r, "x-pieces", v, sizeof(v));
    check(atoi(v) > 1, "chunked byte by byte: the body came in pieces (x-pieces %s)", v);
    resp_free(&r);
    expect_done("c3", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c,
                   "POST /echo?t=c4 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: Chunked\r\n\r\n"
                   "0\r\n\r\n",
                   &r, 0);
    expect_status("empty chunked body, \"Chunked\"", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("empty chunked body, \"Chunked\"", &r, "", 0);
    expect_header("empty chunked body, \"Chunked\"", &r, "x-pieces", "0");
    resp_free(&r);
    expect_done("c4", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c, "GET /echo?t=c5 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("a GET after the empty chunked body", &r, rc, "HTTP/1.1 200 OK");
    expect_header("a GET after the empty chunked body", &r, "x-tag", "c5");
    resp_free(&r);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ------------------------------------------------ scenario 3: keep-alive, pipelining */

/* 3. Three requests one after the other on one connection; three written in one send (the
 * responses in order); three in one send with a suspended one in the middle; a request sent
 * while the one before it is suspended; 200 in one send. */
static void test_keep_alive(void **state)
{
    int f0 = begin("3 keep-alive and pipelining");
    static const char pipe1[] = "GET /echo?t=k4 HTTP/1.1\r\nHost: test\r\n\r\n"
                                "POST /echo?t=k5 HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n"
                                "\r\nfive5"
                                "GET /echo?t=k6&q=6 HTTP/1.1\r\nHost: test\r\n\r\n";
    static const char pipe2[] = "GET /echo?t=k7 HTTP/1.1\r\nHost: test\r\n\r\n"
                                "GET /wait?t=k8&ms=150 HTTP/1.1\r\nHost: test\r\n\r\n"
                                "POST /echo?t=k9 HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n"
                                "\r\nnine";
    struct cl c, c2;
    struct resp r;
    struct hs_stats st;
    char req[128], tag[8], what[64];
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    for (int i = 1; i <= 3; i++) {
        snprintf(tag, sizeof(tag), "k%d", i);
        snprintf(req, sizeof(req), "GET /echo?t=%s HTTP/1.1\r\nHost: test\r\n\r\n", tag);
        snprintf(what, sizeof(what), "keep-alive request %d", i);
        rc = roundtrip(&c, req, &r, 0);
        expect_status(what, &r, rc, "HTTP/1.1 200 OK");
        expect_header(what, &r, "x-tag", tag);
        resp_free(&r);
    }

    open_cl(&c2, 0);
    cl_sends(&c2, pipe1);
    for (int i = 4; i <= 6; i++) {
        snprintf(tag, sizeof(tag), "k%d", i);
        snprintf(what, sizeof(what), "pipelined response %d", i - 3);
        rc = cl_read_resp(&c2, &r, 0, WAIT_MS);
        expect_status(what, &r, rc, "HTTP/1.1 200 OK");
        expect_header(what, &r, "x-tag", tag);
        if (i == 5)
            expect_cl_body(what, &r, "five5", 5);
        if (i == 6)
            expect_header(what, &r, "x-q", "[6]");
        resp_free(&r);
    }
    cl_sends(&c2, pipe2);
    for (int i = 7; i <= 9; i++) {
        snprintf(tag, sizeof(tag), "k%d", i);
        snprintf(what, sizeof(what), "pipelined around a suspension, response %d", i - 6);
        rc = cl_read_resp(&c2, &r, 0, WAIT_MS);
        expect_status(what, &r, rc, "HTTP/1.1 200 OK");
        expect_header(what, &r, "x-tag", tag);
        if (i == 8)
            expect_cl_body(what, &r, "waited\n", 7);
        if (i == 9)
            expect_cl_body(what, &r, "nine", 4);
        resp_free(&r);
    }
    check(cl_quiet(&c2, 100), "nothing more on the pipelined connection");

    /* the next request arrives while the one before it is suspended: kept, served after */
    cl_sends(&c2, "GET /wait?t=k10&ms=300 HTTP/1.1\r\nHost: test\r\n\r\n");
    check(req_wait("k10", U_SUSPENDED, WAIT_MS).suspended, "k10 is suspended");
    cl_sends(&c2, "POST /echo?t=k11 HTTP/1.1\r\nHost: test\r\nContent-Length: 6\r\n\r\neleven");
    rc = cl_read_resp(&c2, &r, 0, WAIT_MS);
    expect_status("suspended, the next request sent meanwhile", &r, rc, "HTTP/1.1 200 OK");
    expect_header("suspended, the next request sent meanwhile", &r, "x-tag", "k10");
    resp_free(&r);
    rc = cl_read_resp(&c2, &r, 0, WAIT_MS);
    expect_status("the request sent during the suspension", &r, rc, "HTTP/1.1 200 OK");
    expect_header("the request sent during the suspension", &r, "x-tag", "k11");
    expect_cl_body("the request sent during the suspension", &r, "eleven", 6);
    resp_free(&r);
    /* 200 requests in one send (about 26 KB, more than one read): all answered, in order */
    {
        struct bytes b = {0};
        char one[160], body[16];
        int good = 0;
        char first_bad[300] = "";

        for (int i = 0; i < 200; i++) {
            if (i % 2 == 0)
                snprintf(one, sizeof(one), "GET /echo?t=P%d HTTP/1.1\r\nHost: test\r\n\r\n", i);
            else
                snprintf(one, sizeof(one),
                         "POST /echo?t=P%d HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n"
                         "body-%03d",
                         i, 8, i);
            bytes_add(&b, one, strlen(one));
        }
        cl_send(&c2, b.p, b.n);
        free(b.p);
        for (int i = 0; i < 200; i++) {
            char v[32];

            snprintf(tag, sizeof(tag), "P%d", i);
            snprintf(body, sizeof(body), "body-%03d", i);
            rc = cl_read_resp(&c2, &r, 0, WAIT_MS);
            resp_header(&r, "x-tag", v, sizeof(v));
            if (rc == 0 && strcmp(r.status_line, "HTTP/1.1 200 OK") == 0 && strcmp(v, tag) == 0 &&
                r.body.n == (i % 2 ? 8u : 0u) && (i % 2 == 0 || memcmp(r.body.p, body, 8) == 0))
                good++;
            else if (first_bad[0] == '\0')
                snprintf(first_bad, sizeof(first_bad),
                         "; first wrong: %.15s: \"%.100s\" x-tag \"%.31s\" %.100s", tag,
                         r.status_line, v, rc ? r.err : "");
            resp_free(&r);
            if (rc != 0)
                break;
        }
        check(good == 200,
              "200 pipelined requests in one send: all answered right, in order (%d%s)", good,
              first_bad);
    }
    for (int i = 1; i <= 11; i++) {
        snprintf(tag, sizeof(tag), "k%d", i);
        expect_done(tag, HS_TOE_OK, WAIT_MS);
    }
    st = stats_now();
    check(st.accepted == 2 && st.requests == 211 && st.open == 2,
          "stats: 2 accepted, 211 requests, 2 open (%llu, %llu, %llu)",
          (unsigned long long)st.accepted, (unsigned long long)st.requests,
          (unsigned long long)st.open);
    cl_close(&c);
    cl_close(&c2);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* --------------------------------------------- scenario 4: HTTP/1.0, Connection: close */

static void expect_status_10(const char *what, const struct resp *r, int rc)
{
    if (rc != 0)
        check(0, "%s: HTTP/1.x 200 OK (read failed: %s)", what, r->err);
    else
        check(strcmp(r->status_line, "HTTP/1.1 200 OK") == 0 ||
                  strcmp(r->status_line, "HTTP/1.0 200 OK") == 0,
              "%s: status line \"HTTP/1.1 200 OK\" or \"HTTP/1.0 200 OK\" (got \"%s\")", what,
              r->status_line);
}

/* 4. HTTP/1.0 closes after the response unless it asks for keep-alive (which the response then
 * confirms); HTTP/1.1 "Connection: close" (any case) and a handler's Connection: close close;
 * a request pipelined after "Connection: close" is not served. */
static void test_http10_close(void **state)
{
    int f0 = begin("4 HTTP/1.0, keep-alive, Connection: close");
    struct cl c;
    struct resp r;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);

    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /echo?t=h1 HTTP/1.0\r\n\r\n", &r, 0);
    expect_status_10("HTTP/1.0", &r, rc);
    expect_cl_body("HTTP/1.0", &r, "", 0);
    expect_header("HTTP/1.0", &r, "x-version", "HTTP/1.0");
    resp_free(&r);
    expect_closed("HTTP/1.0 without keep-alive", &c, WAIT_MS);
    cl_close(&c);
    expect_done("h1", HS_TOE_OK, WAIT_MS);

    open_cl(&c, 0);
    rc = roundtrip(&c,
                   "POST /echo?t=h2 HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n"
                   "\r\nabc",
                   &r, 0);
    expect_status_10("HTTP/1.0 keep-alive", &r, rc);
    expect_cl_body("HTTP/1.0 keep-alive", &r, "abc", 3);
    expect_header("HTTP/1.0 keep-alive", &r, "Connection", "keep-alive");
    resp_free(&r);
    rc = roundtrip(&c, "GET /echo?t=h3 HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r, 0);
    expect_status_10("HTTP/1.0 keep-alive, second request", &r, rc);
    expect_header("HTTP/1.0 keep-alive, second request", &r, "x-tag", "h3");
    expect_header("HTTP/1.0 keep-alive, second request", &r, "Connection", "keep-alive");
    resp_free(&r);
    rc = roundtrip(&c, "GET /echo?t=h4 HTTP/1.0\r\n\r\n", &r, 0);
    expect_status_10("HTTP/1.0 keep-alive, third request without it", &r, rc);
    expect_header("HTTP/1.0 keep-alive, third request without it", &r, "x-tag", "h4");
    resp_free(&r);
    expect_closed("HTTP/1.0, third request without keep-alive", &c, WAIT_MS);
    cl_close(&c);

    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /echo?t=h5 HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", &r, 0);
    expect_status("HTTP/1.1 Connection: close", &r, rc, "HTTP/1.1 200 OK");
    expect_header("HTTP/1.1 Connection: close", &r, "Connection", "close");
    expect_cl_body("HTTP/1.1 Connection: close", &r, "", 0);
    resp_free(&r);
    expect_closed("HTTP/1.1 Connection: close", &c, WAIT_MS);
    cl_close(&c);

    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /echo?t=h6 HTTP/1.1\r\nHost: test\r\nConnection: Close\r\n\r\n", &r, 0);
    expect_status("HTTP/1.1 Connection: Close", &r, rc, "HTTP/1.1 200 OK");
    expect_header("HTTP/1.1 Connection: Close", &r, "Connection", "close");
    resp_free(&r);
    expect_closed("HTTP/1.1 Connection: Close", &c, WAIT_MS);
    cl_close(&c);

    /* a request pipelined after "Connection: close" is never served */
    open_cl(&c, 0);
    rc = roundtrip(&c,
                   "GET /echo?t=h8 HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
                   "GET /echo?t=h9 HTTP/1.1\r\nHost: test\r\n\r\n",
                   &r, 0);
    expect_status("Connection: close, then a pipelined request", &r, rc, "HTTP/1.1 200 OK");
    expect_header("Connection: close, then a pipelined request", &r, "x-tag", "h8");
    resp_free(&r);
    expect_closed("Connection: close, then a pipelined request", &c, WAIT_MS);
    cl_close(&c);
    check(!req_wait("h9", U_SEEN, 0).found,
          "the request pipelined after Connection: close never reached the handler");

    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /echo?t=h7&close=1 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("handler's Connection: close", &r, rc, "HTTP/1.1 200 OK");
    expect_header("handler's Connection: close", &r, "Connection", "close");
    resp_free(&r);
    expect_closed("handler's Connection: close", &c, WAIT_MS);
    cl_close(&c);
    for (int i = 2; i <= 7; i++) {
        char tag[8];

        snprintf(tag, sizeof(tag), "h%d", i);
        expect_done(tag, HS_TOE_OK, WAIT_MS);
    }
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ------------------------------------------------------------------ scenario 5: HEAD */

/* 5. HEAD: the GET's headers (Content-Length of the body it would have), no body byte; the next
 * request on the connection is read right. Also for a stream and an empty body. */
static void test_head(void **state)
{
    int f0 = begin("5 HEAD");
    struct cl c;
    struct resp r;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    rc = roundtrip(&c, "HEAD /big?t=d1&bytes=1000 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 1);
    expect_status("HEAD of 1000 bytes", &r, rc, "HTTP/1.1 200 OK");
    expect_header("HEAD of 1000 bytes", &r, "Content-Length", "1000");
    expect_no_header("HEAD of 1000 bytes", &r, "Transfer-Encoding");
    resp_free(&r);
    check(cl_quiet(&c, 200), "HEAD of 1000 bytes: no body byte follows the head");
    expect_done("d1", HS_TOE_OK, WAIT_MS);
    rc = roundtrip(&c, "GET /echo?t=d2 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("GET after HEAD", &r, rc, "HTTP/1.1 200 OK");
    expect_header("GET after HEAD", &r, "x-tag", "d2");
    resp_free(&r);

    rc = roundtrip(&c, "HEAD /stream?t=d3&n=2&gap=10 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 1);
    expect_status("HEAD of a stream", &r, rc, "HTTP/1.1 200 OK");
    expect_header("HEAD of a stream", &r, "x-tag", "d3");
    expect_no_header("HEAD of a stream", &r, "Content-Length");
    resp_free(&r);
    check(cl_quiet(&c, 200), "HEAD of a stream: no body byte follows the head");
    expect_done("d3", HS_TOE_OK, WAIT_MS);
    check(stream_frees("d3", WAIT_MS) == 1, "HEAD of a stream: its free function ran once");
    rc = roundtrip(&c, "HEAD /echo?t=d4 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 1);
    expect_status("HEAD of an empty body", &r, rc, "HTTP/1.1 200 OK");
    expect_header("HEAD of an empty body", &r, "Content-Length", "0");
    expect_header("HEAD of an empty body", &r, "x-method", "HEAD");
    resp_free(&r);
    rc = roundtrip(&c, "GET /echo?t=d5 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("GET after two HEADs", &r, rc, "HTTP/1.1 200 OK");
    expect_header("GET after two HEADs", &r, "x-tag", "d5");
    resp_free(&r);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ----------------------------------------------------- scenario 6: Expect: 100-continue */

/* 6. Expect: 100-continue: "HTTP/1.1 100 Continue\r\n\r\n" comes before the client sends the
 * body, then the final response. An early answer to such a request needs no body. */
static void test_expect_continue(void **state)
{
    int f0 = begin("6 Expect: 100-continue");
    struct cl c;
    struct resp r;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    rc = roundtrip(&c,
                   "POST /echo?t=x1 HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n"
                   "Expect: 100-continue\r\n\r\n",
                   &r, 0);
    expect_status("Expect: 100-continue, before the body", &r, rc, "HTTP/1.1 100 Continue");
    check(r.head.n == 25 && memcmp(r.head.p, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0,
          "the interim response is exactly \"HTTP/1.1 100 Continue\\r\\n\\r\\n\" (%zu bytes)",
          r.head.n);
    resp_free(&r);
    cl_sends(&c, "hello");
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("Expect: 100-continue, after the body", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("Expect: 100-continue, after the body", &r, "hello", 5);
    resp_free(&r);
    expect_done("x1", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c,
                   "POST /echo?t=x2 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"
                   "Expect: 100-continue\r\n\r\n",
                   &r, 0);
    expect_status("Expect with a chunked body", &r, rc, "HTTP/1.1 100 Continue");
    resp_free(&r);
    cl_sends(&c, "3\r\nabc\r\n0\r\n\r\n");
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("Expect with a chunked body, final", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("Expect with a chunked body, final", &r, "abc", 3);
    resp_free(&r);
    expect_done("x2", HS_TOE_OK, WAIT_MS);
    cl_close(&c);

    open_cl(&c, 0);
    rc = roundtrip(&c,
                   "POST /early?t=x3 HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n"
                   "Expect: 100-continue\r\n\r\n",
                   &r, 0);
    if (rc == 0 && r.status == 100) {
        note("early answer to Expect: 100-continue came after a 100 Continue");
        resp_free(&r);
        rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    }
    check(rc == 0 && r.status == 413 && strncmp(r.status_line, "HTTP/1.1 413 ", 13) == 0,
          "Expect and an early answer: \"HTTP/1.1 413 ...\" without the body sent (got \"%s\"%s%s)",
          r.status_line, rc ? ", " : "", rc ? r.err : "");
    expect_header("Expect and an early answer", &r, "Connection", "close");
    expect_cl_body("Expect and an early answer", &r, "too large\n", 10);
    resp_free(&r);
    expect_closed("Expect and an early answer", &c, WAIT_MS);
    cl_close(&c);
    expect_done("x3", HS_TOE_OK, WAIT_MS);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ----------------------------------------------------- scenario 7: server's own errors */

struct bad_case {
    const char *name;
    char *req;       /* malloc'd */
    int status, alt; /* the expected status, and another one the header allows (0: none) */
    const char *tag; /* the handler is called (the head was fine): its tag; else NULL */
};

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;

    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    assert_non_null(s);
    return s;
}

/* A head of exactly total bytes (through the blank line), padded in an X-Pad header. */
static char *head_of(const char *tag, size_t total)
{
    char *pre = str_printf("GET /echo?t=%s HTTP/1.1\r\nHost: test\r\nX-Pad: ", tag);
    size_t pl = strlen(pre), pad = total - pl - 4;
    char *s = malloc(total + 1);

    assert_non_null(s);
    memcpy(s, pre, pl);
    memset(s + pl, 'p', pad);
    memcpy(s + pl + pad, "\r\n\r\n", 5);
    free(pre);
    return s;
}

/* n header lines in all (Host included). */
static char *lines_of(const char *tag, int n)
{
    struct bytes b = {0};
    char line[64];

    snprintf(line, sizeof(line), "GET /echo?t=%s HTTP/1.1\r\nHost: test\r\n", tag);
    bytes_add(&b, line, strlen(line));
    for (int i = 1; i < n; i++) {
        snprintf(line, sizeof(line), "x-h%03d: %d\r\n", i, i);
        bytes_add(&b, line, strlen(line));
    }
    bytes_add(&b, "\r\n", 2);
    return b.p;
}

static const char *reason_of(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 505:
        return "HTTP Version Not Supported";
    }
    return "?";
}

/* 7. Requests the server answers itself (400, 431, 505) and closes; heads just within the limits
 * are served; bad_requests counts the answered ones. */
static void test_server_errors(void **state)
{
    int f0 = begin("7 malformed requests, limits");
    char longext[1200];
    struct bad_case bad[] = {
        {"one-word request line", str_printf("BLAH\r\n\r\n"), 400, 0, NULL},
        {"request line of four words", str_printf("GET /echo HTTP/1.1 x\r\nHost: test\r\n\r\n"),
         400, 0, NULL},
        {"request line without a version", str_printf("GET /echo\r\nHost: test\r\n\r\n"), 400, 0,
         NULL},
        {"HTTP/2.0", str_printf("GET /echo HTTP/2.0\r\nHost: test\r\n\r\n"), 505, 400, NULL},
        {"version HTTP/x.y", str_printf("GET /echo HTTP/x.y\r\nHost: test\r\n\r\n"), 400, 505,
         NULL},
        {"version FOO/1.1", str_printf("GET /echo FOO/1.1\r\nHost: test\r\n\r\n"), 400, 505, NULL},
        {"Content-Length and Transfer-Encoding",
         str_printf("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
         400, 0, NULL},
        {"unsupported transfer coding",
         str_printf("POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: gzip\r\n\r\n"), 400,
         501, NULL},
        {"Content-Length 12a",
         str_printf("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 12a\r\n\r\n"), 400, 0,
         NULL},
        {"Content-Length -1",
         str_printf("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: -1\r\n\r\n"), 400, 0,
         NULL},
        {"two different Content-Length",
         str_printf("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n"
                    "Content-Length: 6\r\n\r\nhello"),
         400, 0, NULL},
        {"obs-fold header line",
         str_printf("GET /echo HTTP/1.1\r\nHost: test\r\nX-A: b\r\n c\r\n\r\n"), 400, 0, NULL},
        {"header line without a colon",
         str_printf("GET /echo HTTP/1.1\r\nHost: test\r\nNoColonHere\r\n\r\n"), 400, 0, NULL},
        {"blank before the colon", str_printf("GET /echo HTTP/1.1\r\nHost : test\r\n\r\n"), 400, 0,
         NULL},
        {"bad chunk size",
         str_printf("POST /echo?t=e1 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "zz\r\nhello\r\n0\r\n\r\n"),
         400, 0, "e1"},
        {"chunk size overflowing 64 bits",
         str_printf("POST /echo?t=e2 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "10000000000000001\r\nhello\r\n"),
         400, 0, "e2"},
        {"chunk-size line over 1 KiB", NULL, 400, 0, "e3"},
        {"head over head_max_bytes", head_of("e4", HEAD_MAX + 500), 431, 0, NULL},
        {"head over head_max_bytes, its end never sent", NULL, 431, 0, NULL},
        {"101 header lines", lines_of("e5", 101), 431, 400, NULL},
    };
    size_t nbad = sizeof(bad) / sizeof(bad[0]);
    struct hs_stats st0, st;
    struct cl c;
    struct resp r;
    char shown[200];
    int rc;

    (void)state;
    memset(longext, 'e', sizeof(longext) - 1);
    longext[sizeof(longext) - 1] = '\0';
    bad[16].req = str_printf("POST /echo?t=e3 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: "
                             "chunked\r\n\r\n5;%s\r\nhello\r\n0\r\n\r\n",
                             longext);
    bad[18].req = head_of("e6", HEAD_MAX + 500);
    bad[18].req[HEAD_MAX + 100] = '\0'; /* no blank line: the server must not wait for it */
    assert_int_equal(fx_start(NULL), 0);
    st0 = stats_now();
    for (size_t i = 0; i < nbad; i++) {
        open_cl(&c, 0);
        rc = roundtrip(&c, bad[i].req, &r, 0);
        if (rc == 0 && bad[i].alt != 0 && r.status == bad[i].alt) {
            char want[80];

            snprintf(want, sizeof(want), "HTTP/1.1 %d %s", bad[i].alt, reason_of(bad[i].alt));
            expect_status(bad[i].name, &r, rc, want);
        } else {
            char want[80];

            snprintf(want, sizeof(want), "HTTP/1.1 %d %s", bad[i].status, reason_of(bad[i].status));
            if (rc != 0)
                check(0, "%s: \"%s\" for \"%s\" (read failed: %s)", bad[i].name, want,
                      esc(bad[i].req, strlen(bad[i].req), shown, sizeof(shown)), r.err);
            else
                check(strcmp(r.status_line, want) == 0, "%s: status line \"%s\"%s%s%s (got \"%s\")",
                      bad[i].name, want, bad[i].alt ? " or the " : "",
                      bad[i].alt ? reason_of(bad[i].alt) : "", bad[i].alt ? " one" : "",
                      r.status_line);
        }
        if (rc == 0) {
            char cl[32];
            int ncl = resp_header(&r, "Content-Length", cl, sizeof(cl));

            expect_header(bad[i].name, &r, "Connection", "close");
            check(r.framing == 1 && ncl == 1 && (size_t)strtoull(cl, NULL, 10) == r.body.n,
                  "%s: the error's body has its Content-Length (%d CL, \"%s\", %zu bytes)",
                  bad[i].name, ncl, cl, r.body.n);
        }
        resp_free(&r);
        expect_closed(bad[i].name, &c, WAIT_MS);
        cl_close(&c);
        if (bad[i].tag != NULL) {
            struct rsnap s = req_wait(bad[i].tag, U_DONE, WAIT_MS);

            check(s.found && s.completed == 1 && s.toe != HS_TOE_OK,
                  "%s: the handler saw the head; completed once, not OK (%d calls, toe %s)",
                  bad[i].name, s.completed, s.completed ? toe_name(s.toe) : "-");
        }
    }
    st = stats_now();
    check(st.bad_requests - st0.bad_requests == nbad, "stats: bad_requests went up by %zu (%llu)",
          nbad, (unsigned long long)(st.bad_requests - st0.bad_requests));
    pthread_mutex_lock(&mu);
    check(n_reqs == 3, "the handler saw only the heads that were fine (%d requests, 3 expected)",
          n_reqs);
    pthread_mutex_unlock(&mu);

    /* just within the limits */
    {
        char *h = head_of("w1", HEAD_MAX - 8);
        char *l = lines_of("w2", 100);

        open_cl(&c, 0);
        rc = roundtrip(&c, h, &r, 0);
        expect_status("head 8 bytes under head_max_bytes", &r, rc, "HTTP/1.1 200 OK");
        resp_free(&r);
        rc = roundtrip(&c, l, &r, 0);
        expect_status("100 header lines", &r, rc, "HTTP/1.1 200 OK");
        resp_free(&r);
        cl_close(&c);
        free(h);
        free(l);
    }
    expect_done("w1", HS_TOE_OK, WAIT_MS);
    expect_done("w2", HS_TOE_OK, WAIT_MS);
    for (size_t i = 0; i < nbad; i++)
        free(bad[i].req);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ------------------------------------------------------ scenario 8: suspend / resume */

/* 8. A suspended request answered after its resume (once, three times, at once); a resume of a
 * request that is not suspended does nothing; a request suspended at its head gets its body
 * after the resume; 50 suspended at once, half resumed from the resumer thread. */
static void test_suspend_resume(void **state)
{
    int f0 = begin("8 suspend and resume");
    struct cl c, many[N_CONCURRENT];
    struct resp r;
    struct rsnap s;
    uint64_t t0, dt;
    unsigned wakes0;
    int rc, ok = 0;
    char first_bad[300] = "";

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    t0 = tg_now_mono_ms();
    rc = roundtrip(&c, "GET /wait?t=s1&ms=200 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    dt = tg_now_mono_ms() - t0;
    expect_status("suspended 200 ms", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("suspended 200 ms", &r, "waited\n", 7);
    expect_header("suspended 200 ms", &r, "x-resumes", "1");
    check(dt >= 190, "suspended 200 ms: the response came after the resume (%llu ms)",
          (unsigned long long)dt);
    resp_free(&r);
    s = expect_done("s1", HS_TOE_OK, WAIT_MS);
    check(s.finals == 2, "s1: the handler was called at the body's end and after the resume (%d)",
          s.finals);

    rc = roundtrip(&c, "GET /wait?t=s2&ms=50&times=3 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("suspended three times", &r, rc, "HTTP/1.1 200 OK");
    expect_header("suspended three times", &r, "x-resumes", "3");
    resp_free(&r);
    rc = roundtrip(&c, "GET /wait?t=s3&ms=0 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("resumed at once", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    rc = roundtrip(&c, "GET /wait?t=s4&ms=0&xt=1 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("resumed at once from the other thread", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);

    /* a spurious resume at the head; the body comes 100 ms later */
    cl_sends(&c, "POST /echo?t=s5&spurious=1 HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\n");
    usleep(100000);
    cl_sends(&c, "body");
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("resume of a request not suspended", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("resume of a request not suspended", &r, "body", 4);
    expect_header("resume of a request not suspended", &r, "x-finals", "1");
    resp_free(&r);

    /* suspended at the head, before the body: the body (sent with the head, and a piece 50 ms
     * later) reaches the handler only after the resume */
    t0 = tg_now_mono_ms();
    cl_sends(&c, "POST /susphead?t=s6&ms=200 HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n"
                 "\r\nfirst");
    usleep(50000);
    cl_sends(&c, "-last");
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    dt = tg_now_mono_ms() - t0;
    expect_status("suspended at the head", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("suspended at the head", &r, "first-last", 10);
    check(dt >= 190, "suspended at the head: the response came after the resume (%llu ms)",
          (unsigned long long)dt);
    resp_free(&r);
    s = expect_done("s6", HS_TOE_OK, WAIT_MS);
    check(s.susp_calls == 0,
          "suspended at the head: the handler was not called during the suspension (%d calls)",
          s.susp_calls);

    wakes0 = atomic_load(&n_wakes);
    for (int i = 0; i < N_CONCURRENT; i++) {
        char req[128];

        open_cl(&many[i], 0);
        snprintf(req, sizeof(req), "GET /wait?t=m%d&ms=%d&xt=%d HTTP/1.1\r\nHost: test\r\n\r\n", i,
                 100 + (i * 37) % 300, i % 2);
        cl_sends(&many[i], req);
    }
    t0 = tg_now_mono_ms();
    for (int i = 0; i < N_CONCURRENT; i++) {
        char tag[16], v[32];

        snprintf(tag, sizeof(tag), "m%d", i);
        rc = cl_read_resp(&many[i], &r, 0, WAIT_MS);
        resp_header(&r, "x-tag", v, sizeof(v));
        if (rc == 0 && strcmp(r.status_line, "HTTP/1.1 200 OK") == 0 && strcmp(v, tag) == 0 &&
            r.body.n == 7 && memcmp(r.body.p, "waited\n", 7) == 0)
            ok++;
        else if (first_bad[0] == '\0')
            snprintf(first_bad, sizeof(first_bad),
                     "; first wrong: %.15s: \"%.100s\" x-tag \"%.31s\" %.100s", tag, r.status_line,
                     v, rc ? r.err : "");
        resp_free(&r);
        cl_close(&many[i]);
    }
    dt = tg_now_mono_ms() - t0;
    check(ok == N_CONCURRENT, "%d requests suspended at once all answered right (%d%s)",
          N_CONCURRENT, ok, first_bad);
    check(dt < 3000, "%d suspended requests answered within 3 s (%llu ms)", N_CONCURRENT,
          (unsigned long long)dt);
    check(atomic_load(&n_wakes) > wakes0, "hs_resume from the other thread called wake (%u calls)",
          atomic_load(&n_wakes) - wakes0);
    ok = 0;
    for (int i = 0; i < N_CONCURRENT; i++) {
        char tag[16];

        snprintf(tag, sizeof(tag), "m%d", i);
        s = req_wait(tag, U_DONE, WAIT_MS);
        ok += s.completed == 1 && s.toe == HS_TOE_OK && s.resumes == 1;
    }
    check(ok == N_CONCURRENT, "the %d suspended requests completed OK after one resume each (%d)",
          N_CONCURRENT, ok);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ---------------------------------------------------------------- scenario 9: streams */

/* 9. Streaming responses: chunked framing byte for byte with the trailer, resumed from the loop
 * and from the resumer thread, no chunk at all, a reader error, 1 MiB as fast as it goes, the
 * HTTP/1.0 form (unchunked, then the close). */
static void test_streams(void **state)
{
    int f0 = begin("9 streaming responses");
    struct cl c;
    struct resp r;
    struct bytes got = {0};
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /stream?t=st1&n=3&gap=30 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("stream of 3 chunks", &r, rc, "HTTP/1.1 200 OK");
    expect_header("stream of 3 chunks", &r, "Transfer-Encoding", "chunked");
    expect_no_header("stream of 3 chunks", &r, "Content-Length");
    expect_header("stream of 3 chunks", &r, "x-tag", "st1");
    expect_stream_raw("stream of 3 chunks", &r, "st1", 3);
    check(strcmp(r.trailers, "x-chunks: 3\r\n") == 0,
          "stream of 3 chunks: trailer \"x-chunks: 3\" (got \"%s\")",
          esc(r.trailers, strlen(r.trailers), (char[200]){0}, 200));
    resp_free(&r);
    expect_done("st1", HS_TOE_OK, WAIT_MS);
    check(stream_frees("st1", WAIT_MS) == 1, "st1: the free function ran once");

    rc = roundtrip(&c, "GET /stream?t=st2&n=4&gap=20&xt=1 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("stream resumed from the other thread", &r, rc, "HTTP/1.1 200 OK");
    expect_stream_raw("stream resumed from the other thread", &r, "st2", 4);
    resp_free(&r);
    expect_done("st2", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c, "GET /stream?t=st3&n=0 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("stream without a chunk", &r, rc, "HTTP/1.1 200 OK");
    expect_stream_raw("stream without a chunk", &r, "st3", 0);
    resp_free(&r);
    expect_done("st3", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c, "GET /bigstream?t=st4&bytes=1048576 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("1 MiB stream", &r, rc, "HTTP/1.1 200 OK");
    check(r.framing == 2 && r.body.n == 1048576 && pat_mismatch(r.body.p, r.body.n, 0) == r.body.n,
          "1 MiB stream: chunked, every byte in order (%zu bytes in %d chunks, first wrong at %zu)",
          r.body.n, r.nchunks, r.body.p != NULL ? pat_mismatch(r.body.p, r.body.n, 0) : 0);
    check(strcmp(r.trailers, "") == 0, "1 MiB stream: no trailer");
    resp_free(&r);
    expect_done("st4", HS_TOE_OK, WAIT_MS);

    rc = roundtrip(&c, "GET /echo?t=st5 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("a request after four streams", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);

    /* a reader error after two chunks: the connection closes, no last chunk */
    rc = roundtrip(&c, "GET /stream?t=st6&n=5&gap=10&fail=2 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    check(rc != 0 && strcmp(r.status_line, "HTTP/1.1 200 OK") == 0,
          "reader error after two chunks: the head came, the body never ends (%s)",
          rc == 0 ? "the body ended" : r.err);
    for (int k = 0; k < 2; k++) {
        char ch[CHUNK_BYTES], line[8];

        snprintf(line, sizeof(line), "%x\r\n", CHUNK_BYTES);
        bytes_add(&got, line, strlen(line));
        chunk_of("st6", k, ch);
        bytes_add(&got, ch, CHUNK_BYTES);
        bytes_add(&got, "\r\n", 2);
    }
    check(r.raw.n == got.n && memcmp(r.raw.p, got.p, got.n) == 0,
          "reader error after two chunks: exactly two chunks came (%zu bytes, %zu expected)",
          r.raw.n, got.n);
    free(got.p);
    resp_free(&r);
    expect_closed("reader error", &c, WAIT_MS);
    expect_done("st6", HS_TOE_ERROR, WAIT_MS);
    check(stream_frees("st6", WAIT_MS) == 1, "st6: the free function ran once");
    cl_close(&c);

    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /stream?t=st7&n=3&gap=20 HTTP/1.0\r\n\r\n", &r, 0);
    expect_status_10("HTTP/1.0 stream", &r, rc);
    expect_no_header("HTTP/1.0 stream", &r, "Transfer-Encoding");
    expect_no_header("HTTP/1.0 stream", &r, "Content-Length");
    expect_stream_plain("HTTP/1.0 stream", &r, "st7", 3);
    resp_free(&r);
    cl_close(&c);
    expect_done("st7", HS_TOE_OK, WAIT_MS);
    check(stream_frees("st7", WAIT_MS) == 1, "st7: the free function ran once");

    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /stream?t=st8&n=2&gap=10 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                   &r, 0);
    expect_status_10("HTTP/1.0 keep-alive stream", &r, rc);
    expect_no_header("HTTP/1.0 keep-alive stream", &r, "Transfer-Encoding");
    expect_stream_plain("HTTP/1.0 keep-alive stream (closes anyway)", &r, "st8", 2);
    resp_free(&r);
    cl_close(&c);
    expect_done("st8", HS_TOE_OK, WAIT_MS);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ---------------------------------------------------------- scenario 10: client gone */

/* Close (or reset) c while the request tagged tag is suspended; completed with CLIENT_GONE
 * within GONE_MS. */
static void gone_while_suspended(const char *what, struct cl *c, const char *tag, int reset)
{
    struct rsnap s = req_wait(tag, U_SUSPENDED, WAIT_MS);
    uint64_t t0;

    check(s.found && s.suspended && s.completed == 0, "%s: the request is suspended", what);
    t0 = tg_now_mono_ms();
    if (reset)
        cl_reset(c);
    else
        cl_close(c);
    s = req_wait(tag, U_DONE, WAIT_MS);
    check(s.completed == 1 && s.toe == HS_TOE_CLIENT_GONE && s.t_completed - t0 <= GONE_MS,
          "%s: completed once with HS_TOE_CLIENT_GONE within %u ms (%d calls, toe %s, %lld ms)",
          what, GONE_MS, s.completed, s.completed ? toe_name(s.toe) : "-",
          s.completed ? (long long)(s.t_completed - t0) : -1LL);
}

/* 10. The client goes away: while its request is suspended (close, reset, a resume pending on
 * the other thread), during a stream suspended between chunks, during a fast stream. */
static void test_client_gone(void **state)
{
    int f0 = begin("10 client gone while suspended or streaming");
    struct cl c;
    struct resp r;
    struct rsnap s;
    struct hs_stats st;
    uint64_t t0, dl;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    cl_sends(&c, "GET /wait?t=g1&ms=10000 HTTP/1.1\r\nHost: test\r\n\r\n");
    gone_while_suspended("close while suspended", &c, "g1", 0);
    open_cl(&c, 0);
    cl_sends(&c, "GET /wait?t=g2&ms=10000 HTTP/1.1\r\nHost: test\r\n\r\n");
    gone_while_suspended("reset while suspended", &c, "g2", 1);
    open_cl(&c, 0);
    cl_sends(&c, "GET /wait?t=g3&ms=10000&xt=1 HTTP/1.1\r\nHost: test\r\n\r\n");
    gone_while_suspended("close while suspended, resume due on the other thread", &c, "g3", 0);
    open_cl(&c, 0);
    cl_sends(&c, "POST /wait?t=g4&ms=10000 HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nok");
    gone_while_suspended("close while a POST is suspended", &c, "g4", 0);

    /* the stream's first chunk is read, the next one is 10 s away */
    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /stream?t=g5&n=5&gap=10000 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 1);
    expect_status("stream suspended between chunks", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    dl = tg_now_mono_ms() + WAIT_MS;
    while (c.len < 4 + CHUNK_BYTES + 2 && cl_fill(&c, dl) == 1)
        ;
    check(c.len == 4 + CHUNK_BYTES + 2,
          "stream suspended between chunks: the first chunk came "
          "(%zu bytes)",
          c.len);
    gone_while_suspended("close while a stream is suspended between chunks", &c, "g5", 0);
    check(stream_frees("g5", WAIT_MS) == 1, "g5: the stream's free function ran once");

    /* a fast stream (a chunk every 5 ms) cut after its head: gone or a failed write */
    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /stream?t=g6&n=100000&gap=5 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 1);
    expect_status("fast stream", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    usleep(50000);
    t0 = tg_now_mono_ms();
    cl_close(&c);
    s = req_wait("g6", U_DONE, WAIT_MS);
    check(s.completed == 1 && (s.toe == HS_TOE_CLIENT_GONE || s.toe == HS_TOE_ERROR) &&
              s.t_completed - t0 <= GONE_MS,
          "close during a fast stream: completed once, CLIENT_GONE or ERROR, within %u ms (%d "
          "calls, toe %s)",
          GONE_MS, s.completed, s.completed ? toe_name(s.toe) : "-");
    check(stream_frees("g6", WAIT_MS) == 1, "g6: the stream's free function ran once");

    dl = tg_now_mono_ms() + WAIT_MS;
    do {
        st = stats_now();
        if (st.open == 0)
            break;
        usleep(20000);
    } while (tg_now_mono_ms() < dl);
    check(st.open == 0, "stats: no connection left open (%llu)", (unsigned long long)st.open);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* -------------------------------------------------------------- scenario 11: deadlines */

/* Wait for the server to close c: the time it took, in [lo_ms, hi_ms]. With want408 the bytes
 * before the close must be a 408 (the server's answer to a late head or body), else none. */
static void expect_deadline_close(const char *what, struct cl *c, uint64_t t0, unsigned lo_ms,
                                  unsigned hi_ms, int want408)
{
    struct resp r;
    uint64_t dt;
    int closed;
    size_t extra = 0;

    if (want408) {
        int rc = cl_read_resp(c, &r, 0, hi_ms + 2000);

        expect_status(what, &r, rc, "HTTP/1.1 408 Request Timeout");
        expect_header(what, &r, "Connection", "close");
        resp_free(&r);
    }
    closed = cl_wait_closed(c, hi_ms + 2000, &extra);
    dt = tg_now_mono_ms() - t0;
    check(closed && dt >= lo_ms && dt <= hi_ms,
          "%s: closed by its deadline after %u to %u ms (%s after %llu ms)", what, lo_ms, hi_ms,
          closed ? "closed" : "still open", (unsigned long long)dt);
    check(extra == 0, "%s: nothing more before the close (%zu)", what, extra);
}

/* 11. Deadlines (1 s each): a connection that never sends and one with half a head get 408 and
 * close after header_timeout_ms; so does a head dribbled a byte every 200 ms (progress does not
 * extend it: slowloris); a kept-alive connection idle after a response is closed silently after
 * keepalive_timeout_ms; half a body gets 408 after body_timeout_ms (the handler sees
 * HS_TOE_TIMEOUT); a body sent steadily but below body_min_rate is cut the same way, one sent
 * faster is read whole; a request waiting 2.5 s for its response and a stream with 1.5 s gaps
 * are not touched. */
static void test_deadlines(void **state)
{
    int f0 = begin("11 deadlines");
    struct fx_opts o = {.header_timeout_ms = 1000,
                        .body_timeout_ms = 1000,
                        .body_min_rate = 100,
                        .keepalive_timeout_ms = 1000,
                        .send_timeout_ms = 1000};
    struct cl a, b, h, p, w, sx, d, sl, fa;
    struct resp r;
    struct hs_stats st;
    struct rsnap s;
    uint64_t t0;
    int rc;
    static const char head[] = "GET /echo?t=i7 HTTP/1.1\r\nHost: test\r\nX-Pad: 0123456789\r\n\r\n";

    (void)state;
    assert_int_equal(fx_start(&o), 0);
    t0 = tg_now_mono_ms();
    open_cl(&a, 0);
    open_cl(&b, 0);
    open_cl(&h, 0);
    open_cl(&p, 0);
    open_cl(&w, 0);
    open_cl(&sx, 0);
    cl_sends(&w, "GET /wait?t=i5&ms=2500 HTTP/1.1\r\nHost: test\r\n\r\n");
    cl_sends(&sx, "GET /stream?t=i6&n=2&gap=1500 HTTP/1.1\r\nHost: test\r\n\r\n");
    cl_sends(&h, "GET /echo?t=i3 HTTP/1.1\r\nHo");
    cl_sends(&p, "POST /echo?t=i4 HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n0123456789");
    rc = roundtrip(&b, "GET /echo?t=i2 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("before idling", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);

    expect_deadline_close("a connection that never sent a byte (closed, no 408)", &a, t0, 800, 2500, 0);
    expect_deadline_close("a connection idle after a response", &b, t0, 800, 2500, 0);
    expect_deadline_close("a connection with half a head", &h, t0, 800, 2500, 1);
    expect_deadline_close("a connection with half a body", &p, t0, 800, 2500, 1);
    s = req_wait("i3", U_SEEN, 0);
    check(!s.found, "half a head: the handler was never called");
    expect_done("i4", HS_TOE_TIMEOUT, WAIT_MS);

    rc = cl_read_resp(&w, &r, 0, WAIT_MS);
    expect_status("waiting 2.5 s for the response", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("waiting 2.5 s for the response", &r, "waited\n", 7);
    resp_free(&r);
    cl_close(&w); /* before its own keep-alive deadline can count */
    expect_done("i5", HS_TOE_OK, WAIT_MS);
    rc = cl_read_resp(&sx, &r, 0, WAIT_MS);
    expect_status("stream with 1.5 s gaps", &r, rc, "HTTP/1.1 200 OK");
    expect_stream_raw("stream with 1.5 s gaps", &r, "i6", 2);
    resp_free(&r);
    cl_close(&sx);
    expect_done("i6", HS_TOE_OK, WAIT_MS);

    /* slowloris: a byte every 200 ms keeps arriving, the head never completes in time */
    open_cl(&d, 0);
    t0 = tg_now_mono_ms();
    cl_dribble(&d, head, sizeof(head) - 1, 200);
    expect_deadline_close("a head dribbled a byte every 200 ms", &d, t0, 800, 2500, 1);
    check(!req_wait("i7", U_SEEN, 0).found, "the dribbled head never reached the handler");

    /* a body at 50 B/s (body_min_rate 100): 408 by about 1 s + 50 / 100 s */
    open_cl(&sl, 0);
    t0 = tg_now_mono_ms();
    cl_sends(&sl, "POST /echo?t=i8 HTTP/1.1\r\nHost: test\r\nContent-Length: 400\r\n\r\n");
    cl_dribble(&sl, "0123456789012345678901234567890123456789012345678901234567890123456789"
                    "01234567890123456789012345678901234567890123456789",
               120, 20);
    expect_deadline_close("a body below body_min_rate", &sl, t0, 800, 4000, 1);
    expect_done("i8", HS_TOE_TIMEOUT, WAIT_MS);

    /* a body at 2,000 B/s (above the rate): read whole although it takes longer than 1 s */
    open_cl(&fa, 0);
    cl_sends(&fa, "POST /echo?t=i9 HTTP/1.1\r\nHost: test\r\nContent-Length: 3000\r\n"
                  "Connection: close\r\n\r\n");
    {
        char body[3000];

        memset(body, 'b', sizeof(body));
        for (int i = 0; i < 30; i++) {
            cl_send(&fa, body + i * 100, 100);
            usleep(50000);
        }
    }
    rc = cl_read_resp(&fa, &r, 0, WAIT_MS);
    expect_status("a 3,000-byte body over 1.5 s, above the minimum rate", &r, rc,
                  "HTTP/1.1 200 OK");
    resp_free(&r);
    cl_close(&fa);

    st = stats_now();
    check(st.header_timeouts == 3, "stats: 3 header timeouts (%llu)",
          (unsigned long long)st.header_timeouts);
    check(st.body_timeouts == 2, "stats: 2 body timeouts (%llu)",
          (unsigned long long)st.body_timeouts);
    check(st.timeouts == 1, "stats: 1 keep-alive idle close (%llu)",
          (unsigned long long)st.timeouts);
    cl_close(&a);
    cl_close(&b);
    cl_close(&h);
    cl_close(&p);
    cl_close(&d);
    cl_close(&sl);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* -------------------------------------------------------- scenario 12: max_connections */

/* 12. max_connections = 4: the fifth connection gets 503 with Retry-After and is closed (refused
 * counts it), even with a request sent, which never reaches the handler; once one closes, a new
 * one is served. Then a per-address cap of 2 (hs_ipcap): the third connection from 127.0.0.1
 * gets 503 the same way (refused_ip), and a new one is served once one closed. */
static void expect_refused(const char *what, struct cl *c)
{
    struct resp r;
    int rc = cl_read_resp(c, &r, 0, WAIT_MS);

    expect_status(what, &r, rc, "HTTP/1.1 503 Service Unavailable");
    expect_header(what, &r, "Retry-After", "1");
    expect_header(what, &r, "Connection", "close");
    resp_free(&r);
    expect_closed(what, c, GONE_MS);
}

static void test_max_connections(void **state)
{
    int f0 = begin("12 max_connections");
    struct fx_opts o = {.max_connections = 4};
    struct cl c[4], x;
    struct resp r;
    struct hs_stats st;
    uint64_t dl;
    int rc;

    (void)state;
    assert_int_equal(fx_start(&o), 0);
    for (int i = 0; i < 4; i++) {
        char req[96], what[48];

        open_cl(&c[i], 0);
        snprintf(req, sizeof(req), "GET /echo?t=c%d HTTP/1.1\r\nHost: test\r\n\r\n", i);
        snprintf(what, sizeof(what), "connection %d of 4", i + 1);
        rc = roundtrip(&c[i], req, &r, 0);
        expect_status(what, &r, rc, "HTTP/1.1 200 OK");
        resp_free(&r);
    }
    open_cl(&x, 0);
    expect_refused("the fifth connection", &x);
    cl_close(&x);
    open_cl(&x, 0);
    cl_sends(&x, "GET /echo?t=c5 HTTP/1.1\r\nHost: test\r\n\r\n");
    expect_refused("the fifth connection with a request", &x);
    cl_close(&x);
    st = stats_now();
    check(st.refused == 2 && st.open == 4, "stats: 2 refused, 4 open (%llu, %llu)",
          (unsigned long long)st.refused, (unsigned long long)st.open);
    cl_close(&c[0]);
    dl = tg_now_mono_ms() + WAIT_MS;
    do {
        st = stats_now();
        if (st.open == 3)
            break;
        usleep(10000);
    } while (tg_now_mono_ms() < dl);
    check(st.open == 3, "stats: 3 open after a client closed (%llu)", (unsigned long long)st.open);
    open_cl(&x, 0);
    rc = roundtrip(&x, "GET /echo?t=c6 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("a new connection once one closed", &r, rc, "HTTP/1.1 200 OK");
    expect_header("a new connection once one closed", &r, "x-tag", "c6");
    resp_free(&r);
    check(!req_wait("c5", U_SEEN, 0).found, "the refused connection's request never reached the "
                                            "handler");
    cl_close(&x);
    for (int i = 1; i < 4; i++)
        cl_close(&c[i]);
    fx_stop();

    /* the per-address cap */
    o.max_connections = 100;
    o.ipcap = hs_ipcap_create(2, 100);
    assert_non_null(o.ipcap);
    assert_int_equal(fx_start(&o), 0);
    for (int i = 0; i < 2; i++) {
        char req[96];

        open_cl(&c[i], 0);
        snprintf(req, sizeof(req), "GET /echo?t=p%d HTTP/1.1\r\nHost: test\r\n\r\n", i);
        rc = roundtrip(&c[i], req, &r, 0);
        expect_status("per-address cap: connection within it", &r, rc, "HTTP/1.1 200 OK");
        resp_free(&r);
    }
    open_cl(&x, 0);
    cl_sends(&x, "GET /echo?t=p2 HTTP/1.1\r\nHost: test\r\n\r\n");
    expect_refused("per-address cap: the third connection", &x);
    cl_close(&x);
    st = stats_now();
    check(st.refused_ip == 1 && st.refused == 0, "stats: 1 refused by address, 0 by the total "
          "(%llu, %llu)", (unsigned long long)st.refused_ip, (unsigned long long)st.refused);
    cl_close(&c[0]);
    dl = tg_now_mono_ms() + WAIT_MS;
    do {
        st = stats_now();
        if (st.open == 1)
            break;
        usleep(10000);
    } while (tg_now_mono_ms() < dl);
    open_cl(&x, 0);
    rc = roundtrip(&x, "GET /echo?t=p3 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("per-address cap: a new connection once one closed", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    check(!req_wait("p2", U_SEEN, 0).found, "per-address cap: the refused request never reached "
                                            "the handler");
    cl_close(&x);
    cl_close(&c[1]);
    fx_stop();
    hs_ipcap_destroy(&o.ipcap);
    check(o.ipcap == NULL, "hs_ipcap_destroy sets the pointer to NULL");
    assert_int_equal(n_failed, f0);
}

/* ---------------------------------------------------- scenario 14: the head's byte policy */

struct raw_case {
    const char *name; /* named after the defect it pins */
    const char *req;
    size_t len;
    const char *tag; /* a tag the handler must never see */
};

#define RAW(s) s, sizeof(s) - 1

/* 14. Any byte the grammar forbids in a head is a 400 and a close, and the process lives on:
 * NUL (it used to crash the server through an unchecked search result), a bare CR (a header line
 * starting with one used to end the header section silently, hiding the rest), other control
 * bytes; an HTTP/1.1 request without Host or with two; then the path reaches the handler as sent
 * (not percent-decoded), and HTTP/1.0 with Transfer-Encoding is read chunked and closed after
 * its answer. */
static void test_head_policy(void **state)
{
    int f0 = begin("14 head byte policy");
    static const struct raw_case bad[] = {
        {"nul_byte_in_header_value_crashed_the_server",
         RAW("GET /echo?t=n1 HTTP/1.1\r\nHost: a\0b\r\n\r\n"), "n1"},
        {"nul_byte_in_request_line", RAW("GET /ec\0ho?t=n2 HTTP/1.1\r\nHost: a\r\n\r\n"), "n2"},
        {"nul_byte_in_header_name", RAW("GET /echo?t=n3 HTTP/1.1\r\nHo\0st: a\r\n\r\n"), "n3"},
        {"nul_byte_before_any_line_end", RAW("\0GET /echo?t=n4 HTTP/1.1\r\n\r\n"), "n4"},
        {"bare_cr_header_line_ended_the_header_section",
         RAW("GET /echo?t=n5 HTTP/1.1\r\nHost: a\r\n\rX-Hidden: 1\r\n\r\n"), "n5"},
        {"bare_cr_in_a_header_value", RAW("GET /echo?t=n6 HTTP/1.1\r\nHost: a\rb\r\n\r\n"), "n6"},
        {"control_byte_0x01_in_a_value", RAW("GET /echo?t=n7 HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n"),
         "n7"},
        {"del_byte_in_a_value", RAW("GET /echo?t=n8 HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n\r\n"), "n8"},
        {"escape_byte_in_the_target", RAW("GET /echo\x1b?t=n9 HTTP/1.1\r\nHost: a\r\n\r\n"), "n9"},
        {"http11_without_host_was_accepted", RAW("GET /echo?t=n10 HTTP/1.1\r\n\r\n"), "n10"},
        {"two_host_headers", RAW("GET /echo?t=n11 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), "n11"},
        {"malformed_host", RAW("GET /echo?t=n12 HTTP/1.1\r\nHost: a b\r\n\r\n"), "n12"},
        {"two_content_length_headers",
         RAW("POST /echo?t=n13 HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n"
             "\r\nx"),
         "n13"},
    };
    struct cl c;
    struct resp r;
    struct hs_stats st0, st;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    st0 = stats_now();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        open_cl(&c, 0);
        cl_send(&c, bad[i].req, bad[i].len);
        rc = cl_read_resp(&c, &r, 0, WAIT_MS);
        expect_status(bad[i].name, &r, rc, "HTTP/1.1 400 Bad Request");
        expect_header(bad[i].name, &r, "Connection", "close");
        resp_free(&r);
        expect_closed(bad[i].name, &c, WAIT_MS);
        cl_close(&c);
        check(!req_wait(bad[i].tag, U_SEEN, 0).found, "%s: the handler never saw it",
              bad[i].name);
        /* the process and the server live on */
        open_cl(&c, 0);
        rc = roundtrip(&c, "GET /echo?t=alive HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                       &r, 0);
        expect_status(bad[i].name, &r, rc, "HTTP/1.1 200 OK");
        resp_free(&r);
        cl_close(&c);
    }
    st = stats_now();
    check(st.bad_requests - st0.bad_requests == sizeof(bad) / sizeof(bad[0]),
          "stats: every one counted as a bad request (%llu)",
          (unsigned long long)(st.bad_requests - st0.bad_requests));

    /* path_was_percent_decoded: /ec%68o is not /echo (an ingress's prefix rules see the same
     * path as the router) */
    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /ec%68o?t=p1 HTTP/1.1\r\nHost: a\r\n\r\n", &r, 0);
    expect_status("path_was_percent_decoded: /ec%68o", &r, rc, "HTTP/1.1 404 Not Found");
    resp_free(&r);
    rc = roundtrip(&c, "GET /echo?t=p2&q=a%20b HTTP/1.1\r\nHost: a\r\n\r\n", &r, 0);
    expect_status("query arguments are still decoded", &r, rc, "HTTP/1.1 200 OK");
    expect_header("query arguments are still decoded", &r, "x-q", "[a b]");
    resp_free(&r);
    cl_close(&c);

    /* http10_with_transfer_encoding_was_kept_alive */
    open_cl(&c, 0);
    rc = roundtrip(&c,
                   "POST /echo?t=p3 HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: "
                   "keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                   &r, 0);
    expect_status_10("http10_with_transfer_encoding_was_kept_alive", &r, rc);
    expect_cl_body("http10_with_transfer_encoding_was_kept_alive", &r, "hello", 5);
    expect_header("http10_with_transfer_encoding_was_kept_alive", &r, "Connection", "close");
    resp_free(&r);
    expect_closed("http10_with_transfer_encoding_was_kept_alive", &c, WAIT_MS);
    cl_close(&c);

    /* empty_lines_before_the_request_line_depended_on_the_split: 8,000 empty lines (16,000
     * bytes) before a request of 1.5 KB: served whole and in 100-byte pieces alike (they are
     * dropped as they are seen; kept with the head they filled the read buffer, a 431 when they
     * came whole) */
    for (int pieces = 0; pieces < 2; pieces++) {
        static char lead[16000 + 2048];
        char pad[1500];
        const char *what = pieces ? "8,000 empty lines, then a request, in 100-byte pieces"
                                  : "8,000 empty lines, then a request, in one piece";
        size_t n = 0;

        memset(pad, 'p', sizeof(pad) - 1);
        pad[sizeof(pad) - 1] = '\0';
        for (int i = 0; i < 8000; i++) {
            lead[n++] = '\r';
            lead[n++] = '\n';
        }
        n += (size_t)snprintf(lead + n, sizeof(lead) - n,
                              "GET /echo?t=e%d HTTP/1.1\r\nHost: a\r\nX-Pad: %s\r\n"
                              "Connection: close\r\n\r\n",
                              pieces, pad);
        open_cl(&c, 0);
        if (pieces) {
            for (size_t o = 0; o < n; o += 100) {
                cl_send(&c, lead + o, n - o < 100 ? n - o : 100);
                usleep(1000);
            }
        } else {
            cl_send(&c, lead, n);
        }
        rc = cl_read_resp(&c, &r, 0, WAIT_MS);
        expect_status(what, &r, rc, "HTTP/1.1 200 OK");
        resp_free(&r);
        cl_close(&c);
    }

    /* HTTP/1.0 needs no Host */
    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /echo?t=p4 HTTP/1.0\r\n\r\n", &r, 0);
    expect_status_10("HTTP/1.0 without Host", &r, rc);
    resp_free(&r);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ------------------------------------------------------------------ scenario 13: quiesce */

/* Wait (up to ms) until the stream tagged tag has sent k chunks. */
static int stream_wait_k(const char *tag, int k, unsigned ms)
{
    uint64_t dl = tg_now_mono_ms() + ms;
    int got = -1;

    pthread_mutex_lock(&mu);
    for (;;) {
        struct stream *st = stream_by_tag(tag);

        got = st != NULL ? st->k : -1;
        if (got >= k || tg_now_mono_ms() >= dl)
            break;
        cv_wait_until(dl);
    }
    pthread_mutex_unlock(&mu);
    return got >= k;
}

/* A new connection to the server's port fails (refused), or is closed at once without a byte. */
static void expect_not_listening(const char *what, uint16_t port)
{
    struct cl c;

    if (cl_open(&c, port, 0) != 0) {
        check(errno == ECONNREFUSED, "%s: a new connection is refused (%s)", what, strerror(errno));
        return;
    }
    cl_sends(&c, "GET /echo?t=late HTTP/1.1\r\nHost: test\r\n\r\n");
    expect_closed(what, &c, GONE_MS);
    cl_close(&c);
}

/* 13. hs_server_quiesce: the listening socket closes; an idle keep-alive connection gets its
 * next request served with Connection: close; a suspended request and a stream in progress are
 * served whole; each connection closes after that response. */
static void test_quiesce(void **state)
{
    int f0 = begin("13 quiesce");
    struct cl a, b, sc;
    struct resp r;
    struct rsnap s;
    uint16_t port;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    port = fx.port;
    open_cl(&a, 0);
    open_cl(&b, 0);
    open_cl(&sc, 0);
    cl_sends(&a, "GET /wait?t=q1&ms=600 HTTP/1.1\r\nHost: test\r\n\r\n");
    rc = roundtrip(&b, "GET /echo?t=q2 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("idle connection, first", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    cl_sends(&sc, "GET /stream?t=q3&n=4&gap=150 HTTP/1.1\r\nHost: test\r\n\r\n");
    s = req_wait("q1", U_SUSPENDED, WAIT_MS);
    check(s.suspends == 1, "q1 is suspended before the quiesce");
    check(stream_wait_k("q3", 1, WAIT_MS), "q3 has sent a chunk before the quiesce");

    fx_call(do_quiesce, NULL);
    expect_not_listening("after hs_server_quiesce", port);
    /* an idle kept-alive connection stays open: its next request is served, then it closes */
    rc = roundtrip(&b, "GET /echo?t=q4 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("idle connection across the quiesce", &r, rc, "HTTP/1.1 200 OK");
    expect_header("idle connection across the quiesce", &r, "Connection", "close");
    resp_free(&r);
    expect_closed("idle connection across the quiesce, after its response", &b, WAIT_MS);

    rc = cl_read_resp(&a, &r, 0, WAIT_MS);
    expect_status("suspended across the quiesce", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("suspended across the quiesce", &r, "waited\n", 7);
    expect_header("suspended across the quiesce", &r, "Connection", "close");
    resp_free(&r);
    expect_closed("suspended across the quiesce, after its response", &a, WAIT_MS);
    expect_done("q1", HS_TOE_OK, WAIT_MS);

    rc = cl_read_resp(&sc, &r, 0, WAIT_MS);
    expect_status("stream across the quiesce", &r, rc, "HTTP/1.1 200 OK");
    expect_stream_raw("stream across the quiesce", &r, "q3", 4);
    resp_free(&r);
    expect_closed("stream across the quiesce, after its end", &sc, WAIT_MS);
    expect_done("q3", HS_TOE_OK, WAIT_MS);
    cl_close(&a);
    cl_close(&b);
    cl_close(&sc);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ------------------------------------------------------------------ scenario 14: destroy */

/* 14. hs_server_destroy on the loop thread with two suspended requests (one with its resume due
 * on the other thread), a stream suspended between chunks, an idle connection and one with
 * half a head: completed SHUTDOWN for the three requests, the stream freed, every client closed,
 * the port closed. */
static void test_destroy(void **state)
{
    int f0 = begin("14 destroy with requests in progress");
    struct cl a, b, c, d, e;
    struct resp r;
    uint16_t port;
    uint64_t dl;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    port = fx.port;
    open_cl(&a, 0);
    open_cl(&b, 0);
    open_cl(&c, 0);
    open_cl(&d, 0);
    open_cl(&e, 0);
    cl_sends(&a, "GET /wait?t=z1&ms=10000 HTTP/1.1\r\nHost: test\r\n\r\n");
    rc = roundtrip(&b, "GET /stream?t=z2&n=5&gap=10000 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 1);
    expect_status("stream before the destroy", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    dl = tg_now_mono_ms() + WAIT_MS;
    while (b.len < 4 + CHUNK_BYTES + 2 && cl_fill(&b, dl) == 1)
        ;
    check(b.len == 4 + CHUNK_BYTES + 2, "stream before the destroy: its first chunk came (%zu)",
          b.len);
    b.len = 0;
    cl_sends(&c, "GET /wait?t=z3&ms=10000&xt=1 HTTP/1.1\r\nHost: test\r\n\r\n");
    rc = roundtrip(&d, "GET /echo?t=z4 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("idle connection before the destroy", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    cl_sends(&e, "GET /echo?t=z5 HTTP/1.1\r\nHos");
    req_wait("z1", U_SUSPENDED, WAIT_MS);
    req_wait("z3", U_SUSPENDED, WAIT_MS);
    usleep(50000); /* the half head is in */

    fx_call(do_destroy, NULL);
    pthread_mutex_lock(&mu);
    check(fx.s == NULL, "hs_server_destroy on the loop thread sets the pointer to NULL");
    pthread_mutex_unlock(&mu);
    expect_done("z1", HS_TOE_SHUTDOWN, 0);
    expect_done("z2", HS_TOE_SHUTDOWN, 0);
    expect_done("z3", HS_TOE_SHUTDOWN, 0);
    check(stream_frees("z2", 0) == 1, "z2: the stream's free function ran once, in the destroy");
    expect_closed("suspended request at the destroy", &a, GONE_MS);
    expect_closed("stream at the destroy", &b, GONE_MS);
    expect_closed("suspended request at the destroy (cross-thread resume)", &c, GONE_MS);
    expect_closed("idle connection at the destroy", &d, GONE_MS);
    expect_closed("half a head at the destroy", &e, GONE_MS);
    check(!req_wait("z5", U_SEEN, 0).found, "half a head: the handler was never called");
    expect_not_listening("after hs_server_destroy", port);
    cl_close(&a);
    cl_close(&b);
    cl_close(&c);
    cl_close(&d);
    cl_close(&e);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ----------------------------------------------------------- scenario 15: slow reader */

/* 15. 4 MiB to a client with a small receive buffer that reads 32 KiB at a time with a pause:
 * a buffer response and a stream, whole and in order. */
static void test_slow_reader(void **state)
{
    int f0 = begin("15 4 MiB to a slow reader");
    char req[128];
    struct cl c;
    struct resp r;
    size_t bad;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 16384);
    c.piece = 32768;
    c.slow_us = 1000;
    snprintf(req, sizeof(req), "GET /big?t=b1&bytes=%u HTTP/1.1\r\nHost: test\r\n\r\n", BIG_BYTES);
    cl_sends(&c, req);
    rc = cl_read_resp(&c, &r, 0, 30000);
    expect_status("4 MiB buffer, slow reader", &r, rc, "HTTP/1.1 200 OK");
    snprintf(req, sizeof(req), "%u", BIG_BYTES);
    expect_header("4 MiB buffer, slow reader", &r, "Content-Length", req);
    bad = r.body.p != NULL ? pat_mismatch(r.body.p, r.body.n, 0) : 0;
    check(r.body.n == BIG_BYTES && bad == r.body.n,
          "4 MiB buffer, slow reader: every byte in order (%zu bytes, first wrong at %zu)",
          r.body.n, bad);
    resp_free(&r);
    expect_done("b1", HS_TOE_OK, WAIT_MS);

    snprintf(req, sizeof(req), "GET /bigstream?t=b2&bytes=%u HTTP/1.1\r\nHost: test\r\n\r\n",
             BIG_BYTES);
    cl_sends(&c, req);
    rc = cl_read_resp(&c, &r, 0, 30000);
    expect_status("4 MiB stream, slow reader", &r, rc, "HTTP/1.1 200 OK");
    bad = r.body.p != NULL ? pat_mismatch(r.body.p, r.body.n, 0) : 0;
    check(r.framing == 2 && r.body.n == BIG_BYTES && bad == r.body.n,
          "4 MiB stream, slow reader: chunked, every byte in order (%zu bytes in %d chunks, "
          "first wrong at %zu)",
          r.body.n, r.nchunks, bad);
    resp_free(&r);
    expect_done("b2", HS_TOE_OK, WAIT_MS);
    check(stream_frees("b2", WAIT_MS) == 1, "b2: the stream's free function ran once");

    c.piece = 0;
    c.slow_us = 0;
    rc = roundtrip(&c, "GET /echo?t=b3 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("a request after the slow ones", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ---------------------------------------------------- scenario 16: early answer, refusal */

struct sender {
    int fd;
    size_t n, sent;
};

/* Send n body bytes until done or the server stops taking them. */
static void *sender_main(void *arg)
{
    struct sender *sd = arg;
    char buf[65536];

    memset(buf, 'b', sizeof(buf));
    while (sd->sent < sd->n) {
        size_t w = sd->n - sd->sent < sizeof(buf) ? sd->n - sd->sent : sizeof(buf);
        ssize_t k = send(sd->fd, buf, w, MSG_NOSIGNAL);

        if (k <= 0)
            break;
        sd->sent += (size_t)k;
    }
    return NULL;
}

/* 16. A 413 queued at the head while the client sends a 2 MiB body: readable, Connection:
 * close, then the close; the same with a small body; a handler that refuses at the head or at
 * the end of the body (connection closed, no byte); a second hs_respond. */
static void test_early_refuse(void **state)
{
    int f0 = begin("16 early answer, refusal, double response");
    char req[160];
    struct cl c;
    struct resp r;
    struct rsnap s;
    struct sender sd;
    pthread_t th;
    size_t extra = 0;
    int rc, closed;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    snprintf(req, sizeof(req),
             "POST /early?t=e1 HTTP/1.1\r\nHost: test\r\nContent-Length: %u\r\n\r\n", EARLY_BODY);
    cl_sends(&c, req);
    sd = (struct sender){.fd = c.fd, .n = EARLY_BODY};
    assert_int_equal(pthread_create(&th, NULL, sender_main, &sd), 0);
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    check(rc == 0 && strncmp(r.status_line, "HTTP/1.1 413 ", 13) == 0,
          "early 413 during a 2 MiB body: \"HTTP/1.1 413 ...\" read (got \"%s\"%s%s)",
          r.status_line, rc ? ", " : "", rc ? r.err : "");
    expect_header("early 413 during a 2 MiB body", &r, "Connection", "close");
    expect_cl_body("early 413 during a 2 MiB body", &r, "too large\n", 10);
    resp_free(&r);
    expect_closed("early 413 during a 2 MiB body", &c, 10000);
    pthread_join(th, NULL);
    note("early 413: the client got %zu of %u body bytes out before the close", sd.sent,
         EARLY_BODY);
    cl_close(&c);
    expect_done("e1", HS_TOE_OK, WAIT_MS);

    open_cl(&c, 0);
    rc = roundtrip(&c, "POST /early?t=e2 HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello",
                   &r, 0);
    check(rc == 0 && strncmp(r.status_line, "HTTP/1.1 413 ", 13) == 0,
          "early 413, body in the same write: \"HTTP/1.1 413 ...\" (got \"%s\")", r.status_line);
    expect_header("early 413, body in the same write", &r, "Connection", "close");
    resp_free(&r);
    expect_closed("early 413, body in the same write", &c, WAIT_MS);
    cl_close(&c);
    expect_done("e2", HS_TOE_OK, WAIT_MS);

    open_cl(&c, 0);
    cl_sends(&c, "GET /refuse?t=e3 HTTP/1.1\r\nHost: test\r\n\r\n");
    expect_closed("handler refuses at the head", &c, GONE_MS);
    cl_close(&c);
    expect_done("e3", HS_TOE_ERROR, WAIT_MS);

    open_cl(&c, 0);
    cl_sends(&c, "POST /refuse?t=e4&at=final HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\n"
                 "abcd");
    expect_closed("handler refuses at the body's end", &c, GONE_MS);
    cl_close(&c);
    s = expect_done("e4", HS_TOE_ERROR, WAIT_MS);
    check(s.body_len == 4 && memcmp(s.body, "abcd", 4) == 0,
          "e4: the handler had the body before it refused (%zu bytes)", s.body_len);

    open_cl(&c, 0);
    cl_sends(&c, "GET /twice?t=e5 HTTP/1.1\r\nHost: test\r\n\r\n");
    closed = cl_wait_closed(&c, WAIT_MS, &extra);
    check(closed, "a second hs_respond: the connection is closed (%zu bytes came before)", extra);
    cl_close(&c);
    s = req_wait("e5", U_DONE, WAIT_MS);
    check(s.respond2 == HS_NO, "a second hs_respond returns HS_NO (%d)", s.respond2);
    check(s.completed == 1, "e5: completed once (%d, toe %s)", s.completed,
          s.completed ? toe_name(s.toe) : "-");
    fx_stop();
    assert_int_equal(n_failed, f0);
}

/* ------------------------------------------------------------------------------ main */

/* ------------------------------------------------------------------ scenario 17: mutations */

#define MUT_INPUTS 150   /* mutated requests, one connection each */
#define MUT_QUIET_MS 200 /* a server that stays silent this long is waiting for more bytes */

static uint64_t mut_state = 0x9e3779b97f4a7c15ull;

static uint64_t mut_rand(void)
{
    mut_state ^= mut_state >> 12;
    mut_state ^= mut_state << 25;
    mut_state ^= mut_state >> 27;
    return mut_state * 0x2545F4914F6CDD1Dull;
}

/* 17. Requests mutated at random (bytes replaced, inserted, deleted, cut, repeated; a fixed
 * seed): whatever the input, every answer starts with an HTTP/1.x status line, every request
 * the handler saw completes once (fx_stop), every connection is closed once its client is
 * gone, and the server then serves a normal request. Run under ASan/UBSan in CI. */
static void test_mutations(void **state)
{
    static const char *const tmpl[] = {
        "GET /echo?t=m&a=1 HTTP/1.1\r\nHost: test\r\nx-in: v\r\nConnection: close\r\n\r\n",
        "POST /echo?t=m HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\nConnection: close\r\n\r\n"
        "hello world",
        "POST /echo?t=m HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\nConnection: "
        "close\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nT: v\r\n\r\n",
        "GET /stream?t=m&n=2 HTTP/1.0\r\nHost: test\r\n\r\n",
    };
    /* every class of byte the head grammar cares about, NUL and other control bytes included
     * (the explicit \0 is part of the alphabet: sizeof - 1 drops only the terminator) */
    static const char alphabet[] = "\r\n :;/?%=&\t-0123456789abcdefABCDEF\x7f\xff\x01\x1b\0";
    int f0 = begin("17 mutations");
    int answered = 0, silent = 0, bad_line = 0;
    char first_bad[200] = "";
    struct resp r;
    struct cl c;
    struct hs_stats st;
    uint64_t dl;
    int rc;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    for (int i = 0; i < MUT_INPUTS; i++) {
        char in[512];
        size_t n = strlen(tmpl[i % 4]);
        int ops = 1 + (int)(mut_rand() % 4);

        memcpy(in, tmpl[i % 4], n);
        for (int k = 0; k < ops && n > 0; k++) {
            size_t at = (size_t)(mut_rand() % n);
            char ch = alphabet[mut_rand() % (sizeof(alphabet) - 1)];

            switch (mut_rand() % 5) {
            case 0: /* replace */
                in[at] = ch;
                break;
            case 1: /* insert */
                if (n + 1 < sizeof(in)) {
                    memmove(in + at + 1, in + at, n - at);
                    in[at] = ch;
                    n++;
                }
                break;
            case 2: /* delete */
                memmove(in + at, in + at + 1, n - at - 1);
                n--;
                break;
            case 3: /* cut */
                n = at;
                break;
            default: { /* repeat a piece in place */
                size_t len = 1 + (size_t)(mut_rand() % 16);

                if (at + len > n)
                    len = n - at;
                if (n + len < sizeof(in)) {
                    memmove(in + at + len, in + at, n - at);
                    n += len;
                }
                break;
            }
            }
        }
        open_cl(&c, 0);
        (void)cl_send(&c, in, n); /* the server may close first */
        /* read until the server closes, or stays quiet (it is waiting for more bytes) */
        dl = tg_now_mono_ms() + WAIT_MS;
        for (;;) {
            struct pollfd pf = {.fd = c.fd, .events = POLLIN};

            if (poll(&pf, 1, MUT_QUIET_MS) <= 0 || cl_fill(&c, dl) != 1)
                break;
        }
        if (c.len == 0) {
            silent++;
        } else {
            answered++;
            if (c.len < 13 || memcmp(c.buf, "HTTP/1.", 7) != 0 || c.buf[8] != ' ' ||
                c.buf[9] < '1' || c.buf[9] > '5' || memmem(c.buf, c.len, "\r\n\r\n", 4) == NULL) {
                if (bad_line++ == 0) {
                    char e1[100], e2[100];

                    snprintf(first_bad, sizeof(first_bad), "input \"%s\" -> \"%s\"",
                             esc(in, n, e1, sizeof(e1)),
                             esc(c.buf, c.len < 40 ? c.len : 40, e2, sizeof(e2)));
                }
            }
        }
        cl_close(&c);
    }
    note("%d inputs answered, %d left unanswered (incomplete requests)", answered, silent);
    check(bad_line == 0,
          "every answer starts with an HTTP/1.x status line and a whole head (%d%s%s)", bad_line,
          bad_line ? ": " : "", first_bad);
    check(answered > MUT_INPUTS / 4, "most inputs were answered (%d of %d)", answered, MUT_INPUTS);
    dl = tg_now_mono_ms() + WAIT_MS;
    do {
        st = stats_now();
        if (st.open == 0)
            break;
        usleep(10000);
    } while (tg_now_mono_ms() < dl);
    check(st.open == 0, "every connection closed once its client was gone (%llu open)",
          (unsigned long long)st.open);
    open_cl(&c, 0);
    rc = roundtrip(&c, "GET /echo?t=after HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("a normal request after the mutations", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

static int group_setup(void **state)
{
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;

    (void)state;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_cond_init(&xcv, &ca);
    pthread_condattr_destroy(&ca);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < n_reqs; i++)
        free(reqs[i].body);
    n_reqs = 0;
    pthread_cond_destroy(&cv);
    pthread_cond_destroy(&xcv);
    pthread_mutex_destroy(&mu);
    printf("# %u checks, %u failed\n", n_checks, n_failed);
    return 0;
}

/* hs_hold: a held response sends nothing (head included) until hs_server_release, then goes
 * out whole; the server does not let the loop sleep while a connection is held; a pipelined
 * request behind a held one is served after it; a held stream; a client that leaves while held
 * (its connection is freed only once off the held list: ASan watches). */
/* The head without its Date and x-tag lines (they differ between two answers), into out. */
static void head_sans(const struct resp *r, char *out, size_t cap)
{
    const char *p = r->head.p != NULL ? r->head.p : "";
    size_t o = 0;

    while (*p != '\0') {
        const char *e = strstr(p, "\r\n");
        size_t n = e != NULL ? (size_t)(e - p) + 2 : strlen(p);

        if (strncasecmp(p, "Date:", 5) != 0 && strncasecmp(p, "x-tag:", 6) != 0 && o + n < cap) {
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    out[o] = '\0';
}

static void test_held(void **state)
{
    int f0 = begin("18 held responses (hs_hold, hs_server_release)");
    struct cl c, gone;
    struct resp r;
    int rc, again = -1, t = -1;

    (void)state;
    assert_int_equal(fx_start(NULL), 0);
    open_cl(&c, 0);
    cl_sends(&c, "POST /held?t=held1 HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\nbody");
    check(cl_quiet(&c, 300), "held: not a byte of the response before the release");
    fx_call(do_timeout, &t);
    check(t == 0, "held: the loop is not let sleep while a response is held (timeout %d)", t);
    fx_call(do_release, &again);
    check(again == 0, "held: nothing held again after the release (%d)", again);
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("held, released", &r, rc, "HTTP/1.1 200 OK");
    expect_cl_body("held, released", &r, "body", 4);
    resp_free(&r);
    expect_done("held1", HS_TOE_OK, WAIT_MS);
    fx_call(do_timeout, &t);
    check(t != 0, "released: the loop may sleep again (timeout %d)", t);

    /* pipelined behind a held one: nothing of either before the release, both after it */
    cl_sends(&c, "GET /held?t=held2 HTTP/1.1\r\nHost: test\r\n\r\n"
                 "GET /echo?t=held3 HTTP/1.1\r\nHost: test\r\n\r\n");
    check(cl_quiet(&c, 300), "held, pipelined: nothing before the release");
    fx_call(do_release, &again);
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("held, pipelined: the first", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("held, pipelined: the second (not held)", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    expect_done("held2", HS_TOE_OK, WAIT_MS);
    expect_done("held3", HS_TOE_OK, WAIT_MS);

    /* a stream held from its start */
    cl_sends(&c, "GET /heldstream?t=held4 HTTP/1.1\r\nHost: test\r\n\r\n");
    check(cl_quiet(&c, 300), "held stream: nothing before the release");
    fx_call(do_release, &again);
    rc = cl_read_resp(&c, &r, 0, WAIT_MS);
    expect_status("held stream, released", &r, rc, "HTTP/1.1 200 OK");
    check(r.framing == 2 && r.body.n > 0, "held stream: chunked, %zu bytes", r.body.n);
    resp_free(&r);
    expect_done("held4", HS_TOE_OK, WAIT_MS);

    /* bodies on both sides of the body block's size, a head that fills the header room
     * (its copy cannot go there), a HEAD request, each held and then read whole; the slow
     * reader takes the last in small pieces (its unsent head and body outlive many turns) */
    {
        static const struct {
            const char *tag, *method;
            unsigned bytes, fill, rcvbuf;
        } hb[] = {
            {"held7", "GET", 400, 0, 0},
            {"held8", "GET", HS_BODY_BLOCK_BYTES, 0, 0},
            {"held9", "GET", HS_BODY_BLOCK_BYTES + 1, 0, 0},
            {"held10", "GET", 3000, HS_RESP_HEADER_ROOM - 64, 0},
            {"held11", "HEAD", 400, 100, 0},
            {"held12", "GET", 1000000, HS_RESP_HEADER_ROOM - 64, 4096},
        };

        for (size_t i = 0; i < sizeof(hb) / sizeof(hb[0]); i++) {
            struct cl k;
            char req[256], cl[32];
            size_t bad;
            int head = strcmp(hb[i].method, "HEAD") == 0;

            open_cl(&k, (int)hb[i].rcvbuf);
            if (hb[i].rcvbuf > 0) {
                k.piece = 1024;
                k.slow_us = 200;
            }
            snprintf(req, sizeof(req), "%s /heldbig?t=%s&bytes=%u&fill=%u HTTP/1.1\r\nHost: test\r\n\r\n",
                     hb[i].method, hb[i].tag, hb[i].bytes, hb[i].fill);
            cl_sends(&k, req);
            check(cl_quiet(&k, 100), "%s: nothing before the release", hb[i].tag);
            fx_call(do_release, &again);
            rc = cl_read_resp(&k, &r, head, 30000);
            expect_status(hb[i].tag, &r, rc, "HTTP/1.1 200 OK");
            snprintf(cl, sizeof(cl), "%u", hb[i].bytes);
            expect_header(hb[i].tag, &r, "Content-Length", cl);
            check(hb[i].fill == 0 || (r.head.p != NULL && strstr(r.head.p, "x-fill: ffff") != NULL),
                  "%s: the filler header is there", hb[i].tag);
            if (!head) {
                bad = r.body.p != NULL ? pat_mismatch(r.body.p, r.body.n, 0) : 0;
                check(r.body.n == hb[i].bytes && bad == r.body.n,
                      "%s: every byte in order (%zu of %u, first wrong at %zu)", hb[i].tag,
                      r.body.n, hb[i].bytes, bad);
            } else {
                check(r.body.n == 0, "%s: no body (%zu bytes)", hb[i].tag, r.body.n);
            }
            {
                /* the same answer not held: the same head, byte for byte */
                static char want[8192], got[8192];
                char tag2[32];

                head_sans(&r, got, sizeof(got));
                resp_free(&r);
                expect_done(hb[i].tag, HS_TOE_OK, WAIT_MS);
                snprintf(tag2, sizeof(tag2), "%s-ref", hb[i].tag);
                snprintf(req, sizeof(req),
                         "%s /heldbig?t=%s&bytes=%u&fill=%u&hold=0 HTTP/1.1\r\nHost: test\r\n\r\n",
                         hb[i].method, tag2, hb[i].bytes, hb[i].fill);
                rc = roundtrip(&k, req, &r, head);
                expect_status(tag2, &r, rc, "HTTP/1.1 200 OK");
                head_sans(&r, want, sizeof(want));
                check(strcmp(got, want) == 0, "%s: the head as sent when not held (%zu / %zu bytes)",
                      hb[i].tag, strlen(got), strlen(want));
                resp_free(&r);
                expect_done(tag2, HS_TOE_OK, WAIT_MS);
            }
            cl_close(&k);
        }
    }

    /* the client leaves while its response is held: released later without harm */
    open_cl(&gone, 0);
    cl_sends(&gone, "GET /held?t=held5 HTTP/1.1\r\nHost: test\r\n\r\n");
    check(cl_quiet(&gone, 200), "held, client leaving: nothing before the release");
    cl_reset(&gone);
    usleep(100000);
    fx_call(do_release, &again);
    expect_done("held5", HS_TOE_CLIENT_GONE, WAIT_MS);
    rc = roundtrip(&c, "GET /echo?t=held6 HTTP/1.1\r\nHost: test\r\n\r\n", &r, 0);
    expect_status("after a held client left", &r, rc, "HTTP/1.1 200 OK");
    resp_free(&r);
    cl_close(&c);
    fx_stop();
    assert_int_equal(n_failed, f0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_response_api),    cmocka_unit_test(test_basic),
        cmocka_unit_test(test_chunked_request), cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_http10_close),    cmocka_unit_test(test_head),
        cmocka_unit_test(test_expect_continue), cmocka_unit_test(test_server_errors),
        cmocka_unit_test(test_suspend_resume),  cmocka_unit_test(test_streams),
        cmocka_unit_test(test_client_gone),     cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_max_connections), cmocka_unit_test(test_quiesce),
        cmocka_unit_test(test_destroy),         cmocka_unit_test(test_slow_reader),
        cmocka_unit_test(test_early_refuse),    cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_head_policy),     cmocka_unit_test(test_held),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
