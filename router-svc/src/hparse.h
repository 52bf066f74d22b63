/* hparse: HTTP/1.x request framing — the request head and chunked request bodies — as pure
 * functions over bytes: no I/O, no clock, no allocation (the caller owns every buffer). hsrv
 * feeds it what the socket gives, split anywhere; the fuzz target and the differential check
 * against an independent parser feed it the same way.
 *
 * Policy (RFC 9112, strict where the grammar forbids a byte):
 * - Any byte the grammar forbids in the head is a 400: NUL, a CR not followed by LF, and every
 *   other control byte (0x00-0x1f, 0x7f) except HTAB. Lines end with CRLF or a bare LF.
 * - The request line is METHOD SP TARGET SP HTTP/1.x with single spaces; the method is a token,
 *   the target printable ASCII (0x21-0x7e) in origin form (/path?query), absolute form
 *   (http[s]://host[:port][/path][?query], the authority without userinfo or fragment) or "*".
 *   CONNECT is a 400: its target would be in authority form, which is not served. HTTP/2.0 and
 *   later (or 0.x) are a 505. The target is not percent-decoded: routing sees the path exactly
 *   as sent.
 * - Header lines are NAME ":" OWS VALUE OWS; the name a token with no space before the colon;
 *   obsolete line folding is a 400; more than HP_HEADERS_MAX lines a 431.
 * - HTTP/1.1 needs exactly one Host header (RFC 9112 3.2); more than one Host is a 400 in any
 *   version.
 * - Content-Length is digits only and appears at most once; Transfer-Encoding is "chunked" and
 *   nothing else (501 otherwise), at most once, never with Content-Length (400). Whitespace
 *   after either value may only be SP (a HTAB there is a 400: parsers disagree on such a value,
 *   the stuff of request smuggling). A request of HTTP/1.0 with Transfer-Encoding is read
 *   chunked and its connection closed after the answer (RFC 9112 6.1: its framing is faulty).
 * - Connection is a comma-separated list; an element is "close" or "keep-alive" only whole.
 * - Chunked framing: hex size (at most 16 digits), SP (not HTAB) before optional extensions
 *   (";..." with no control byte but HTAB), CRLF; data; CRLF; after the last chunk trailer lines
 *   (NAME ":" value, no control byte but HTAB) up to an empty line. Every line of the chunked
 *   framing ends with CRLF. A trailer named Content-Length or Transfer-Encoding is a 400 (RFC
 *   9110 6.5.1: framing fields have no place there).
 *
 * Threads: none of its own; a struct belongs to one connection. */
#ifndef RT_HPARSE_H
#define RT_HPARSE_H

#include <stddef.h>
#include <stdint.h>

#define HP_HEADERS_MAX 100u     /* header lines per request (431 beyond) */
#define HP_CHUNK_LINE_MAX 1024u /* a chunk-size line with its extensions (400 beyond) */

struct hp_kv {
    const char *k;
    const char *v;
};

/* A parsed head. Every pointer borrows the head buffer given to hp_head_parse. */
struct hp_request {
    const char *method;
    const char *path;  /* the target's path exactly as sent; "/" for an absolute form without
                        * one; "*" for the asterisk form */
    const char *query; /* the raw query (after '?', not decoded), NULL when there is none */
    int minor;         /* 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.2-1.9, read as 1.1) */
    int keep_alive;    /* the connection may serve another request after this one */
    int chunked;       /* Transfer-Encoding: chunked */
    int has_length;    /* Content-Length present */
    uint64_t content_length;
    unsigned nh;      /* header lines in kv[0..nh) */
    struct hp_kv *kv; /* the caller's table (hp_head_parse's kv) */
};

/* The state of a head arriving in pieces: lets hp_head_scan resume where it stopped, so a head
 * dribbled one byte per read costs O(bytes), not O(bytes^2). Reset it (hp_scan_reset) before
 * each request. */
struct hp_scan {
    size_t off;   /* bytes of buf looked at */
    size_t start; /* where the request line starts (after skipped empty lines) */
    int prefix;   /* buf[0, off) is whole empty lines (RFC 9112 2.2): after HP_SCAN_MORE the
                   * caller may drop them and reset (0 while a CR waits for its LF) */
    int lead;     /* still before the request line */
    int bol;      /* at the beginning of a line of the head */
    int cr;       /* the last byte looked at was a CR (an LF must follow) */
};

#define HP_SCAN_MORE 0     /* no end yet, nothing forbidden so far */
#define HP_SCAN_DONE 1     /* *start and *end set: the head is buf[start, end) */
#define HP_SCAN_BAD (-1)   /* a forbidden byte (400); *msg says which */
#define HP_SCAN_LARGE (-2) /* more than max bytes without an end (431) */

/* hp_scan_reset: before the first byte of a request. */
void hp_scan_reset(struct hp_scan *s);

/* hp_head_scan: look at buf[0, len) — the same bytes as the previous call plus what arrived
 * since — for the end of a head (the empty line), rejecting forbidden bytes as soon as they are
 * seen. Empty lines before the request line are skipped and do not count toward max. A head
 * longer than max bytes (from the request line's first byte to its empty line) is
 * HP_SCAN_LARGE. Returns HP_SCAN_*; on DONE, *start and *end delimit the head (through the
 * empty line) in buf. *msg is static. */
int hp_head_scan(struct hp_scan *s, const char *buf, size_t len, size_t max, size_t *start,
                 size_t *end, const char **msg);

/* hp_head_parse: parse a head that hp_head_scan delimited (n bytes at h, through the empty
 * line) in place: h must be writable and have room for n + 1 bytes (a NUL is written at h[n]);
 * lines are cut and the request's strings point into h. kv has room for kv_cap entries: more
 * header lines than kv_cap or HP_HEADERS_MAX are a 431 (hsrv sizes kv to the head's lines, so
 * only HP_HEADERS_MAX bites). Returns 0, or the status to answer with (400, 431, 501, 505) and a
 * static *msg. */
int hp_head_parse(char *h, size_t n, struct hp_kv *kv, unsigned kv_cap, struct hp_request *req,
                  const char **msg);

/* hp_header: value of the first header of that name (ASCII case-insensitive), NULL when none. */
const char *hp_header(const struct hp_request *req, const char *name);

/* hp_tchar: 1 when ch may be part of a token (RFC 9110 5.6.2: a method, a field name). A
 * table: it runs for every byte of every field name, received or sent. */
extern const unsigned char hp_tchar_table[256];
static inline int hp_tchar(unsigned char ch)
{
    return hp_tchar_table[ch];
}

/* hp_hexval: the value of a hex digit, -1 when ch is not one. */
int hp_hexval(unsigned char ch);

/* ---- chunked bodies ---- */

struct hp_chunked {
    int state;
    uint64_t left;          /* bytes left in the current chunk */
    unsigned line;          /* bytes of the current size line, or of the trailer name */
    unsigned digits;        /* hex digits of the current size */
    uint64_t trailer_bytes; /* bytes of the trailer section so far */
    uint64_t trailer_max;   /* cap of the trailer section (431 beyond) */
    unsigned tr_match;      /* framing names the current trailer name may still be (a bit each) */
};

#define HP_CH_MORE 0 /* everything given was used; more bytes are needed */
/* *data, *dlen: body bytes (the caller hands them on, then calls again with the rest) */
#define HP_CH_DATA 1
#define HP_CH_DONE 2 /* the body ended (the last chunk and the trailers were read) */
/* < 0: malformed framing; *status is 400 or 431, *msg says what */

/* hp_chunked_init: before the first byte of a chunked body; trailer_max caps the trailers. */
void hp_chunked_init(struct hp_chunked *d, uint64_t trailer_max);

/* hp_chunked_feed: walk buf[0, len) until a data span, the end of the body, an error, or the
 * end of buf. *used gets the bytes consumed (on DATA through the span's end). Returns
 * HP_CH_MORE, HP_CH_DATA, HP_CH_DONE, or -1 with *status and a static *msg. */
int hp_chunked_feed(struct hp_chunked *d, const char *buf, size_t len, size_t *used,
                    const char **data, size_t *dlen, int *status, const char **msg);

#endif
