/* libFuzzer target for h1 (router-svc/src/h1.h), the built-in HTTP/1.1 client's response parser.
 *
 * The input is the byte stream a provider sends on one connection. It is parsed the way the
 * upstream client does (feed what was read, act on one event at a time, h1_eof at the end), up to
 * FUZZ_RESPONSES_MAX responses in a row (h1_reset between them, as on a kept-alive connection),
 * and each run is written down as a trace: per response the header fields that framing and
 * routing read, the body bytes joined, and how it ended (done and at which stream offset, the
 * error text, or the end of the input).
 *
 * Properties (abort on violation, so the fuzzer reports it):
 *  - split-independence: the trace is the same when the input is fed whole, byte by byte, and
 *    cut at pseudo-random points derived from the input's own bytes;
 *  - h1_feed uses at most the bytes given; H1_NEED_MORE means it used them all; an event other
 *    than H1_NEED_MORE makes progress or ends the response (no endless zero-byte events);
 *  - a body event points inside the bytes just used, is not empty, and a response's body never
 *    holds more bytes than were fed for it; no body after H1_DONE, none before H1_HEADERS;
 *  - H1_HEADERS comes once per response with a final status (200..999); a 204/304 has no body;
 *    a response framed by Content-Length that is done carries exactly that many bytes;
 *  - an error has a non-empty message;
 *  - h1_drain (the same bytes read out for a cancelled transfer, fed whole, byte by byte and in
 *    the same random pieces until it answers other than H1_DRAIN_MORE) agrees with how the
 *    first response reads event by event: H1_DRAIN_CLOSE as soon as its header section says no
 *    keep-alive; H1_DRAIN_BAD for a response that fails; for one that ends kept alive,
 *    H1_DRAIN_KEEP when the piece ends exactly at its end, H1_DRAIN_CLOSE when bytes follow it
 *    in the same piece; H1_DRAIN_MORE to the end of an input that does not end it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h1.h"

#define FUZZ_RESPONSES_MAX 4
#define FUZZ_BYTEWISE_MAX 8192 /* inputs up to this size are also fed one byte at a time */
#define FUZZ_TRACE_SLACK 1024  /* trace bytes per response besides its body */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A run written down: fixed capacity chosen from the input size (bodies never exceed it). */
struct trace {
    char *p;
    size_t len, cap;
};

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "h1_response_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

static void check(int ok, const char *what)
{
    if (!ok)
        fail(what, NULL);
}

static void trace_put(struct trace *t, const void *p, size_t n)
{
    check(t->len + n <= t->cap, "trace over its capacity (body larger than the input?)");
    memcpy(t->p + t->len, p, n);
    t->len += n;
}

static void trace_printf(struct trace *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void trace_printf(struct trace *t, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    check(n >= 0 && (size_t)n < sizeof(line), "trace line too long");
    trace_put(t, line, (size_t)n);
}

/* Per-response state of one run. */
struct resp {
    int headers;    /* H1_HEADERS seen */
    int no_body;    /* 204/304 */
    int64_t length; /* Content-Length framing, -1 when none */
    uint64_t fed;   /* bytes fed since the response started */
    uint64_t body_len;
};

static void resp_start(struct resp *r, struct trace *t)
{
    memset(r, 0, sizeof(*r));
    r->length = -1;
    trace_printf(t, "R\n");
}

/* The body is kept at the end of the trace while the response runs; at its end it is closed
 * with its length so that bodies of successive responses cannot run together. */
static void resp_end(struct resp *r, struct trace *t, const char *how)
{
    trace_printf(t, "\nB%llu %s\n", (unsigned long long)r->body_len, how);
}

/* Feed data[0..size) in the pieces ending at cuts[0..ncuts) (ascending, last == size). */
static void run(const uint8_t *data, size_t size, const size_t *cuts, size_t ncuts, struct trace *t)
{
    struct h1_parser p;
    struct resp r;
    size_t at = 0;
    int responses = 1;
    int ended = 0; /* the whole stream is over: error, or FUZZ_RESPONSES_MAX done */
    int open = 1;  /* a response is under way (started by resp_start) */

    h1_init(&p);
    resp_start(&r, t);
    for (size_t k = 0; k < ncuts && !ended; k++) {
        const char *buf = (const char *)data + at;
        size_t n = cuts[k] - at;
        size_t spins = 0;

        at = cuts[k];
        while (!ended) {
            struct h1_event ev;
            size_t used;

            if (!open) {
                if (n == 0)
                    break;
                h1_reset(&p);
                resp_start(&r, t);
                open = 1;
            }
            used = h1_feed(&p, buf, n, &ev);
            check(used <= n, "h1_feed used more bytes than given");
            check(++spins <= size + 16, "h1_feed makes no progress");
            r.fed += used;
            if (ev.kind == H1_BODY) {
                check(r.headers, "body before H1_HEADERS");
                check(!r.no_body, "body in a 204/304 response");
                check(ev.n > 0, "empty body event");
                check(ev.p >= buf && ev.p + ev.n == buf + used,
                      "body event outside the bytes just used");
                r.body_len += ev.n;
                check(r.body_len <= r.fed, "more body bytes than fed");
                check(r.length < 0 || r.body_len <= (uint64_t)r.length,
                      "body longer than its Content-Length");
                trace_put(t, ev.p, ev.n);
            }
            buf += used;
            n -= used;
            switch (ev.kind) {
            case H1_NEED_MORE:
                check(n == 0, "H1_NEED_MORE with bytes left unused");
                break;
            case H1_HEADERS:
                check(!r.headers, "H1_HEADERS twice in one response");
                check(p.status >= 200 && p.status <= 999, "H1_HEADERS with a non-final status");
                r.headers = 1;
                r.no_body = p.no_body;
                r.length = p.chunked ? -1 : p.content_length;
                trace_printf(t, "H %d 1.%d ka=%d ch=%d cl=%lld ra=%ld nb=%d\n", p.status, p.minor,
                             p.keep_alive, p.chunked, (long long)p.content_length, p.retry_after_s,
                             p.no_body);
                continue;
            case H1_BODY:
                continue;
            case H1_DONE:
                check(r.headers, "H1_DONE without H1_HEADERS");
                check(r.length < 0 || r.no_body || r.body_len == (uint64_t)r.length,
                      "done before Content-Length bytes");
                /* the stream offset where the response ended: where the next one starts */
                trace_printf(t, "D at=%zu ka=%d", at - n, p.keep_alive);
                resp_end(&r, t, "done");
                open = 0;
                if (++responses > FUZZ_RESPONSES_MAX)
                    ended = 1;
                continue;
            case H1_ERROR:
                check(ev.err != NULL && ev.err[0] != '\0', "error without a message");
                trace_printf(t, "E %s", ev.err);
                resp_end(&r, t, "error");
                open = 0;
                ended = 1;
                continue;
            default:
                fail("unknown event kind", NULL);
            }
            break; /* H1_NEED_MORE: next piece */
        }
    }
    if (!ended) {
        struct h1_event ev;
        enum h1_kind k;

        if (!open) {
            /* the peer closes after a complete response: a new parser sees nothing */
            h1_reset(&p);
            resp_start(&r, t);
        }
        k = h1_eof(&p, &ev);
        check(k == ev.kind && (k == H1_DONE || k == H1_ERROR), "h1_eof answered neither");
        if (k == H1_DONE) {
            check(r.headers, "done at EOF without H1_HEADERS");
            trace_printf(t, "EOF done");
        } else {
            check(ev.err != NULL && ev.err[0] != '\0', "EOF error without a message");
            trace_printf(t, "EOF %s", ev.err);
        }
        resp_end(&r, t, "eof");
    }
    h1_reset(&p);
}

/* How the first response of data[0..size) reads, event by event (the reference for h1_drain). */
struct first {
    int headers;  /* H1_HEADERS came */
    int ka;       /* keep_alive at H1_HEADERS */
    int done;     /* H1_DONE came, at offset end */
    int error;    /* H1_ERROR came */
    size_t end;
};

static void first_response(const uint8_t *data, size_t size, struct first *f)
{
    struct h1_parser p;
    const char *buf = (const char *)data;
    size_t n = size;

    memset(f, 0, sizeof(*f));
    h1_init(&p);
    for (;;) {
        struct h1_event ev;
        size_t used = h1_feed(&p, buf, n, &ev);

        buf += used;
        n -= used;
        if (ev.kind == H1_HEADERS) {
            f->headers = 1;
            f->ka = p.keep_alive;
            continue;
        }
        if (ev.kind == H1_BODY)
            continue;
        if (ev.kind == H1_DONE) {
            f->done = 1;
            f->end = size - n;
        } else if (ev.kind == H1_ERROR) {
            f->error = 1;
        }
        break;
    }
    h1_reset(&p);
}

/* h1_drain over data in the pieces ending at cuts[0..ncuts), until it answers: checked against
 * the first response's reading (f). */
static void drain_check(const uint8_t *data, const size_t *cuts, size_t ncuts,
                        const struct first *f, const char *how)
{
    struct h1_parser p;
    enum h1_drain d = H1_DRAIN_MORE;
    size_t at = 0;

    h1_init(&p);
    for (size_t k = 0; k < ncuts && d == H1_DRAIN_MORE; k++) {
        d = h1_drain(&p, (const char *)data + at, cuts[k] - at);
        at = cuts[k];
    }
    h1_reset(&p);
    if (f->headers && !f->ka) {
        if (d != H1_DRAIN_CLOSE)
            fail("h1_drain: no keep-alive, yet not H1_DRAIN_CLOSE", how);
    } else if (f->error) {
        if (d != H1_DRAIN_BAD)
            fail("h1_drain: a failing response, yet not H1_DRAIN_BAD", how);
    } else if (f->done) {
        if (d != (at == f->end ? H1_DRAIN_KEEP : H1_DRAIN_CLOSE))
            fail("h1_drain: a complete kept-alive response, yet the wrong answer", how);
    } else if (d != H1_DRAIN_MORE) {
        fail("h1_drain: an unfinished response, yet an answer", how);
    }
}

/* splitmix64: the split points of one run, from a seed taken from the input itself. */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t random_cuts(size_t size, uint64_t seed, size_t max_piece, size_t *cuts)
{
    size_t n = 0, at = 0;

    while (at < size) {
        size_t piece = 1 + (size_t)(next_rand(&seed) % max_piece);

        at = size - at < piece ? size : at + piece;
        cuts[n++] = at;
    }
    return n;
}

static void compare(const struct trace *whole, const struct trace *other, const char *how)
{
    if (whole->len != other->len || memcmp(whole->p, other->p, whole->len) != 0) {
        fprintf(stderr, "--- fed whole:\n%.*s\n--- fed %s:\n%.*s\n", (int)whole->len, whole->p, how,
                (int)other->len, other->p);
        fail("outcome depends on how the bytes were split", how);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trace whole = {0}, other = {0};
    struct first first;
    size_t *cuts = malloc((size + 1) * sizeof(*cuts));
    size_t cap = size + (FUZZ_RESPONSES_MAX + 2) * FUZZ_TRACE_SLACK;
    uint64_t seed = 0xcbf29ce484222325ull;
    size_t n;

    whole.p = malloc(cap);
    other.p = malloc(cap);
    check(cuts != NULL && whole.p != NULL && other.p != NULL, "out of memory");
    whole.cap = other.cap = cap;
    /* FNV-1a of the input: the seed of the pseudo-random cuts */
    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 0x100000001b3ull;

    first_response(data, size, &first);
    cuts[0] = size;
    run(data, size, cuts, size > 0 ? 1 : 0, &whole);
    drain_check(data, cuts, size > 0 ? 1 : 0, &first, "whole");
    if (size <= FUZZ_BYTEWISE_MAX) {
        for (size_t i = 0; i < size; i++)
            cuts[i] = i + 1;
        other.len = 0;
        run(data, size, cuts, size, &other);
        compare(&whole, &other, "byte by byte");
        drain_check(data, cuts, size, &first, "byte by byte");
    }
    for (size_t max_piece = 3; max_piece <= 300; max_piece *= 10) {
        n = random_cuts(size, seed + max_piece, max_piece, cuts);
        other.len = 0;
        run(data, size, cuts, n, &other);
        compare(&whole, &other, max_piece == 3 ? "in pieces of 1..3" : "in random pieces");
        drain_check(data, cuts, n, &first, "in random pieces");
    }
    free(other.p);
    free(whole.p);
    free(cuts);
    return 0;
}
