/* h1: incremental HTTP/1.1 response parser for the upstream client. No I/O, no allocation
 * except a header line that arrives split across two reads (kept in a buffer of at most
 * H1_LINE_MAX bytes, freed as soon as the line is whole).
 *
 * The caller feeds the bytes it read, in any pieces, and acts on one event at a time:
 *
 *     struct h1_event ev;
 *     while (len > 0 || ...) {
 *         size_t used = h1_feed(&p, buf, len, &ev);
 *         buf += used; len -= used;
 *         switch (ev.kind) { case H1_NEED_MORE: ...; case H1_HEADERS: ...; case H1_BODY: ...
 *                            case H1_DONE: ...; case H1_ERROR: ... }
 *     }
 *
 * Body events point into the caller's buffer (chunked framing removed). Supported framing:
 * Content-Length, Transfer-Encoding: chunked (trailers skipped), and a body delimited by the
 * end of the connection (h1_eof). 1xx interim responses are skipped. Limits: the status line
 * and header section together at most H1_HEADERS_MAX bytes, a chunk-size line at most
 * H1_LINE_MAX bytes. */
#ifndef RT_H1_H
#define RT_H1_H

#include <stddef.h>
#include <stdint.h>

#define H1_HEADERS_MAX (32u * 1024u)
#define H1_LINE_MAX (8u * 1024u)

enum h1_kind {
    H1_NEED_MORE = 0, /* every byte given was used; feed more */
    H1_HEADERS,       /* status and framing known (fields of struct h1_parser) */
    H1_BODY,          /* ev.p / ev.n: body bytes */
    H1_DONE,          /* the response is complete; bytes after it are not used */
    H1_ERROR          /* ev.err names the problem; the connection must be closed */
};

struct h1_event {
    enum h1_kind kind;
    const char *p;
    size_t n;
    const char *err;
};

struct h1_parser {
    int state;      /* internal */
    int status;     /* HTTP status of the final response, 0 until H1_HEADERS */
    int keep_alive; /* the connection may carry another request after H1_DONE */
    int chunked;
    int64_t content_length; /* -1 when absent */
    long retry_after_s;     /* Retry-After in seconds, -1 when absent or not a number */
    uint64_t left;          /* body bytes left (length framing) or in the current chunk */
    size_t header_bytes;    /* bytes of the current header section so far */
    int minor;              /* HTTP/1.minor of the status line */
    int no_body;            /* 204, 304: no body whatever the framing says */
    int started;            /* a byte of a response was parsed */
    char *line;             /* partial line across two feeds, NULL when none */
    size_t line_len;
};

/* h1_init: ready for the first response of a connection. */
void h1_init(struct h1_parser *p);

/* h1_reset: free the partial-line buffer and start over (next response on the connection). */
void h1_reset(struct h1_parser *p);

/* h1_feed: consume bytes until one event; returns the bytes used (<= n). */
size_t h1_feed(struct h1_parser *p, const char *buf, size_t n, struct h1_event *ev);

/* h1_eof: the peer closed the connection. Returns H1_DONE when that ends the body (no length
 * framing), else H1_ERROR with ev->err. */
enum h1_kind h1_eof(struct h1_parser *p, struct h1_event *ev);

/* h1_drain: the bytes of a response nobody reads any more (its transfer was cancelled), the
 * body dropped. H1_DRAIN_MORE: all used, the response goes on; H1_DRAIN_KEEP: it ended, kept
 * alive, with no byte after it here (the connection may carry another request);
 * H1_DRAIN_CLOSE: it ends the connection (no keep-alive, or bytes after its end);
 * H1_DRAIN_BAD: not a valid response. */
enum h1_drain { H1_DRAIN_MORE = 0, H1_DRAIN_KEEP, H1_DRAIN_CLOSE, H1_DRAIN_BAD };
enum h1_drain h1_drain(struct h1_parser *p, const char *buf, size_t n);

/* 1 once any byte of a response was parsed (a closed reused connection before that is safe to
 * retry on a new one). */
int h1_started(const struct h1_parser *p);

#endif
