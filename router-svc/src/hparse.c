/* hparse: HTTP/1.x request framing, pure. See hparse.h for the grammar it enforces.
 *
 * Every search in here is bounded by an explicit end and its result checked before use: the
 * head is validated byte by byte (hp_head_scan, and again by hp_head_parse, which may be handed
 * any bytes), so that no NUL can hide the rest of a line from the string functions used after
 * the check. */
#include "hparse.h"

#include <string.h>
#include <strings.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum {
    CH_SIZE = 0, /* hex digits of a chunk size */
    CH_SIZE_WS,  /* blanks after the digits */
    CH_EXT,      /* ";" extensions up to the CR */
    CH_SIZE_LF,  /* the LF after the size line's CR */
    CH_DATA,     /* chunk data */
    CH_DATA_CR,  /* the CR after chunk data */
    CH_DATA_LF,  /* the LF after it */
    CH_TR_BOL,   /* the beginning of a trailer line (or of the empty line that ends them) */
    CH_TR_NAME,  /* a trailer field name */
    CH_TR_VALUE, /* its value */
    CH_TR_LF,    /* the LF after a trailer line's CR */
    CH_END_LF,   /* the LF of the empty line that ends the trailers */
    CH_DONE
};

/* letters, digits and !#$%&'*+-.^_`|~ */
const unsigned char hp_tchar_table[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1,
};

/* A control byte that no part of a head may carry (HTAB is allowed, CR and LF are framing). */
static int is_bad_ctl(unsigned char ch)
{
    return (ch < 0x20 && ch != '\t' && ch != '\r' && ch != '\n') || ch == 0x7f;
}

int hp_hexval(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* ------------------------------------------------------------------ the head */

void hp_scan_reset(struct hp_scan *s)
{
    s->off = 0;
    s->start = 0;
    s->prefix = 1;
    s->lead = 1;
    s->bol = 0;
    s->cr = 0;
}

/* A byte that changes nothing in hp_head_scan's state once a line has begun: printable ASCII,
 * HTAB and bytes >= 0x80 (obs-text). */
static const unsigned char plain_table[256] = {
    ['\t'] = 1, [0x20 ... 0x7e] = 1, [0x80 ... 0xff] = 1,
};

/* The index of the first byte of buf[i..lim) that plain_table does not mark (lim when none):
 * 16 bytes a step with SSE2 (a control byte but HTAB, or DEL, stops it), then byte by byte. */
static inline size_t plain_run(const char *buf, size_t i, size_t lim)
{
#ifdef __SSE2__
    while (i + 16 <= lim) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(buf + i));
        __m128i ctl = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v); /* <= 0x1f */
        __m128i bad = _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\t')), ctl),
                                   _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f)));
        unsigned m = (unsigned)_mm_movemask_epi8(bad);

        if (m != 0)
            return i + (unsigned)__builtin_ctz(m);
        i += 16;
    }
#endif
    while (i < lim && plain_table[(unsigned char)buf[i]])
        i++;
    return i;
}

int hp_head_scan(struct hp_scan *s, const char *buf, size_t len, size_t max, size_t *start,
                 size_t *end, const char **msg)
{
    for (size_t i = s->off; i < len; i++) {
        unsigned char ch = (unsigned char)buf[i];

        /* the cap counts from the request line: empty lines before it are not the head (the
         * caller drops them while they are all it has, however they were split) */
        if (i - s->start >= max) {
            s->off = i;
            *msg = "request headers too large";
            return HP_SCAN_LARGE;
        }
        if (s->cr) {
            if (ch != '\n') {
                s->off = i;
                *msg = "bare CR in the request head";
                return HP_SCAN_BAD;
            }
            s->cr = 0;
        } else if (ch == '\r') {
            s->cr = 1;
            /* not droppable until its LF is seen: a caller that dropped a lone CR would accept
             * "\r" + "GET ..." arriving in two reads, and reject it in one */
            s->prefix = 0;
            continue;
        }
        if (ch == '\n') {
            if (s->lead) {
                s->start = i + 1; /* an empty line before the request line */
                s->prefix = 1;
            } else if (s->bol) {
                s->off = i + 1;
                *start = s->start;
                *end = i + 1;
                return HP_SCAN_DONE;
            } else {
                s->bol = 1;
            }
            continue;
        }
        if (is_bad_ctl(ch)) {
            s->off = i;
            *msg = ch == 0 ? "NUL byte in the request head" : "control byte in the request head";
            return HP_SCAN_BAD;
        }
        s->prefix = 0;
        s->lead = 0;
        s->bol = 0;
        /* the rest of the line's plain bytes at once, up to the cap's byte (checked above at
         * the next turn) */
        size_t lim = s->start + max < len ? s->start + max : len;

        if (i + 1 < lim)
            i = plain_run(buf, i + 1, lim) - 1;
    }
    s->off = len;
    if (len > s->start && len - s->start > max) {
        *msg = "request headers too large";
        return HP_SCAN_LARGE;
    }
    return HP_SCAN_MORE;
}

/* Cut the line at *p (ending with LF, a CR before it dropped) and advance *p past it. NULL when
 * no LF is left before end. */
static char *cut_line(char **p, char *end)
{
    char *line = *p;
    char *eol;

    if (line >= end)
        return NULL;
    eol = memchr(line, '\n', (size_t)(end - line));
    if (eol == NULL)
        return NULL;
    *eol = '\0';
    if (eol > line && eol[-1] == '\r')
        eol[-1] = '\0';
    *p = eol + 1;
    return line;
}

/* Content-Length: 1 to 19 digits. Returns 0 or -1. */
static int parse_length(const char *v, uint64_t *out)
{
    uint64_t x = 0;
    size_t n = 0;

    for (; *v != '\0'; v++, n++) {
        if (*v < '0' || *v > '9' || n >= 19)
            return -1;
        x = x * 10 + (uint64_t)(*v - '0');
    }
    if (n == 0)
        return -1;
    *out = x;
    return 0;
}

/* Host: reg-name, IPv4 or an IP literal, with an optional port (RFC 3986 authority without
 * userinfo); empty is allowed. */
static int host_ok(const char *v)
{
    static const char extra[] = "-._~!$&'()*+,;=:%[]";

    for (; *v != '\0'; v++) {
        unsigned char ch = (unsigned char)*v;

        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
            continue;
        if (memchr(extra, ch, sizeof(extra) - 1) == NULL)
            return 0;
    }
    return 1;
}

/* Connection: a comma-separated list (RFC 9110 5.6.1) — each element with its OWS trimmed is
 * compared whole, so "x close" (one malformed element) is not "close". */
static void connection_tokens(const char *v, int *tok_close, int *tok_keep)
{
    while (*v != '\0') {
        size_t len = strcspn(v, ",");
        size_t a = 0, b = len;

        while (a < b && (v[a] == ' ' || v[a] == '\t'))
            a++;
        while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
            b--;
        if (b - a == 5 && strncasecmp(v + a, "close", 5) == 0)
            *tok_close = 1;
        else if (b - a == 10 && strncasecmp(v + a, "keep-alive", 10) == 0)
            *tok_keep = 1;
        v += len;
        if (*v == ',')
            v++;
    }
}

/* The request line (a NUL-terminated string without CR/LF). */
static int request_line(char *line, struct hp_request *req, const char **msg)
{
    char *sp1 = strchr(line, ' ');
    char *sp2;
    char *target;
    char *ver;
    char *q;

    if (sp1 == NULL || sp1 == line) {
        *msg = "malformed request line";
        return 400;
    }
    *sp1 = '\0';
    for (const char *m = line; *m != '\0'; m++) {
        if (!hp_tchar((unsigned char)*m)) {
            *msg = "malformed request method";
            return 400;
        }
    }
    target = sp1 + 1;
    sp2 = strchr(target, ' ');
    if (sp2 == NULL || sp2 == target) {
        *msg = "malformed request line";
        return 400;
    }
    *sp2 = '\0';
    ver = sp2 + 1;
    if (strncmp(ver, "HTTP/", 5) != 0 || ver[5] < '0' || ver[5] > '9' || ver[6] != '.' ||
        ver[7] < '0' || ver[7] > '9' || ver[8] != '\0') {
        *msg = "malformed HTTP version";
        return 400;
    }
    for (const char *t = target; *t != '\0'; t++) {
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f) {
            *msg = "malformed request target";
            return 400;
        }
    }
    if (ver[5] != '1') {
        *msg = "HTTP version not supported";
        return 505;
    }
    req->minor = ver[7] == '0' ? 0 : 1;
    req->method = line;
    if (strcmp(line, "CONNECT") == 0) {
        /* CONNECT takes an authority-form target (RFC 9112 3.2.3), which is not served; with
         * any other form the request is malformed (and other parsers read no body after it) */
        *msg = "CONNECT is not supported";
        return 400;
    }
    if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
        /* absolute form: the path starts after the authority, which is a host and port (no
         * userinfo, RFC 9110 4.2.4; no fragment) */
        char *auth = target + (target[4] == ':' ? 7 : 8);
        size_t alen = strcspn(auth, "/?");
        char save = auth[alen];
        int ok;

        auth[alen] = '\0';
        ok = alen > 0 && host_ok(auth);
        auth[alen] = save;
        if (!ok) {
            *msg = "malformed request target";
            return 400;
        }
        if (auth[alen] == '/') {
            target = auth + alen;
        } else {
            q = auth[alen] == '?' ? auth + alen + 1 : NULL;
            auth[alen] = '\0';
            req->path = "/";
            req->query = q;
            return 0;
        }
    } else if (strcmp(target, "*") == 0) {
        req->path = target;
        return 0;
    } else if (target[0] != '/') {
        *msg = "malformed request target";
        return 400;
    }
    q = strchr(target, '?');
    if (q != NULL)
        *q++ = '\0';
    req->path = target;
    req->query = q;
    return 0;
}

/* The field name s of length n is lit (a literal), ASCII case-insensitively: lengths first. */
#define NAME_IS(s, n, lit)                                                                         \
    ((n) == sizeof(lit) - 1 && strncasecmp((s), (lit), sizeof(lit) - 1) == 0)

int hp_head_parse(char *h, size_t n, struct hp_kv *kv, unsigned kv_cap, struct hp_request *req,
                  const char **msg)
{
    char *p = h;
    char *end = h + n;
    char *line;
    unsigned hosts = 0, cls = 0, tes = 0;
    int tok_close = 0, tok_keep = 0, rc;

    memset(req, 0, sizeof(*req));
    req->kv = kv;
    h[n] = '\0';
    /* the bytes again (the parser may be handed any): nothing a string function would stop at */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch;

        i = plain_run(h, i, n);
        if (i >= n)
            break;
        ch = (unsigned char)h[i];
        if (is_bad_ctl(ch)) {
            *msg = ch == 0 ? "NUL byte in the request head" : "control byte in the request head";
            return 400;
        }
        if (ch == '\r' && (i + 1 >= n || h[i + 1] != '\n')) {
            *msg = "bare CR in the request head";
            return 400;
        }
    }
    while (p < end && (*p == '\r' || *p == '\n'))
        p++; /* empty lines before the request line */
    line = cut_line(&p, end);
    if (line == NULL || *line == '\0') {
        *msg = "malformed request line";
        return 400;
    }
    rc = request_line(line, req, msg);
    if (rc != 0)
        return rc;
    for (;;) {
        char *colon, *v, *e;
        size_t nlen;
        int trail_tab;

        line = cut_line(&p, end);
        if (line == NULL) {
            *msg = "request head without its empty line";
            return 400;
        }
        if (*line == '\0')
            break; /* the empty line */
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
        nlen = (size_t)(colon - line);
        for (size_t k = 0; k < nlen; k++) {
            if (!hp_tchar((unsigned char)line[k])) {
                *msg = "malformed header name";
                return 400;
            }
        }
        v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        e = v + strlen(v);
        trail_tab = 0;
        while (e > v && (e[-1] == ' ' || e[-1] == '\t')) {
            trail_tab |= e[-1] == '\t';
            *--e = '\0';
        }
        if (req->nh >= kv_cap || req->nh >= HP_HEADERS_MAX) {
            *msg = "too many header lines";
            return 431;
        }
        kv[req->nh].k = line;
        kv[req->nh].v = v;
        req->nh++;
        if (NAME_IS(line, nlen, "Host")) {
            if (++hosts > 1) {
                *msg = "more than one Host header";
                return 400;
            }
            if (!host_ok(v)) {
                *msg = "malformed Host header";
                return 400;
            }
        } else if (NAME_IS(line, nlen, "Content-Length")) {
            if (++cls > 1) {
                *msg = "more than one Content-Length header";
                return 400;
            }
            if (trail_tab || parse_length(v, &req->content_length) != 0) {
                *msg = "malformed Content-Length";
                return 400;
            }
            req->has_length = 1;
        } else if (NAME_IS(line, nlen, "Transfer-Encoding")) {
            if (++tes > 1) {
                *msg = "more than one Transfer-Encoding header";
                return 400;
            }
            if (trail_tab) {
                *msg = "malformed Transfer-Encoding";
                return 400;
            }
            if (strcasecmp(v, "chunked") != 0) {
                *msg = "unsupported transfer coding (only chunked is)";
                return 501;
            }
            req->chunked = 1;
        } else if (NAME_IS(line, nlen, "Connection")) {
            connection_tokens(v, &tok_close, &tok_keep);
        }
    }
    if (p != end) {
        *msg = "malformed request head";
        return 400;
    }
    if (req->chunked && req->has_length) {
        *msg = "Content-Length and Transfer-Encoding together";
        return 400;
    }
    if (req->minor >= 1 && hosts == 0) {
        *msg = "missing Host header";
        return 400;
    }
    req->keep_alive = req->minor >= 1 ? !tok_close : (tok_keep && !tok_close);
    if (req->minor == 0 && req->chunked)
        req->keep_alive = 0; /* RFC 9112 6.1: faulty framing, close after the answer */
    return 0;
}

const char *hp_header(const struct hp_request *req, const char *name)
{
    for (unsigned i = 0; i < req->nh; i++) {
        if (strcasecmp(req->kv[i].k, name) == 0)
            return req->kv[i].v;
    }
    return NULL;
}

/* ------------------------------------------------------------------ chunked bodies */

void hp_chunked_init(struct hp_chunked *d, uint64_t trailer_max)
{
    memset(d, 0, sizeof(*d));
    d->state = CH_SIZE;
    d->trailer_max = trailer_max;
}

/* Trailer names that would frame the message (RFC 9110 6.5.1; http_parser even parses a
 * trailer Content-Length and fails on a bad one): matched case-insensitively while the name
 * arrives, one bit of d->tr_match per name still possible, d->line counting the name's bytes. */
static const char *const tr_framing_names[] = {"content-length", "transfer-encoding"};
#define TR_FRAMING_N 2u

static void tr_name_byte(struct hp_chunked *d, unsigned char ch)
{
    unsigned char lc = ch >= 'A' && ch <= 'Z' ? (unsigned char)(ch + 32) : ch;

    if (d->tr_match == 0)
        return; /* no framing name: no need to count further */
    for (unsigned k = 0; k < TR_FRAMING_N; k++) {
        const char *n = tr_framing_names[k];

        if (d->line >= strlen(n) || (unsigned char)n[d->line] != lc)
            d->tr_match &= ~(1u << k);
    }
    d->line++;
}

/* The trailer name ended (at its colon): is it a framing name? */
static int tr_framing(const struct hp_chunked *d)
{
    for (unsigned k = 0; k < TR_FRAMING_N; k++) {
        if ((d->tr_match & (1u << k)) && d->line == strlen(tr_framing_names[k]))
            return 1;
    }
    return 0;
}

static int ch_fail(struct hp_chunked *d, int status, const char *m, int *st, const char **msg)
{
    d->state = CH_DONE;
    *st = status;
    *msg = m;
    return -1;
}

int hp_chunked_feed(struct hp_chunked *d, const char *buf, size_t len, size_t *used,
                    const char **data, size_t *dlen, int *status, const char **msg)
{
    size_t off = 0;

    *used = 0;
    if (d->state == CH_DONE)
        return HP_CH_DONE;
    while (off < len) {
        unsigned char ch = (unsigned char)buf[off];

        if (d->state == CH_DATA) {
            size_t take = len - off;

            if (take > d->left)
                take = (size_t)d->left;
            d->left -= take;
            if (d->left == 0)
                d->state = CH_DATA_CR;
            *data = buf + off;
            *dlen = take;
            *used = off + take;
            return HP_CH_DATA;
        }
        off++;
        switch (d->state) {
        case CH_SIZE:
        case CH_SIZE_WS:
        case CH_EXT:
            if (++d->line > HP_CHUNK_LINE_MAX)
                return ch_fail(d, 400, "chunk size line too long", status, msg);
            if (ch == '\r') {
                if (d->digits == 0)
                    return ch_fail(d, 400, "malformed chunk size", status, msg);
                d->state = CH_SIZE_LF;
            } else if (d->state == CH_EXT) {
                if (is_bad_ctl(ch) || ch == '\n')
                    return ch_fail(d, 400, "control byte in a chunk extension", status, msg);
            } else if (ch == ';' && d->digits > 0) {
                d->state = CH_EXT;
            } else if (ch == ' ' && d->digits > 0) {
                /* SP only: a HTAB here splits parsers (http_parser rejects it) */
                d->state = CH_SIZE_WS;
            } else if (d->state == CH_SIZE && hp_hexval(ch) >= 0 && d->digits < 16) {
                d->left = d->left * 16 + (uint64_t)hp_hexval(ch);
                d->digits++;
            } else {
                return ch_fail(d, 400, "malformed chunk size", status, msg);
            }
            break;
        case CH_SIZE_LF:
            if (ch != '\n')
                return ch_fail(d, 400, "malformed chunk size line", status, msg);
            d->line = 0;
            d->digits = 0;
            d->state = d->left == 0 ? CH_TR_BOL : CH_DATA;
            break;
        case CH_DATA_CR:
            if (ch != '\r')
                return ch_fail(d, 400, "chunk data not followed by CRLF", status, msg);
            d->state = CH_DATA_LF;
            break;
        case CH_DATA_LF:
            if (ch != '\n')
                return ch_fail(d, 400, "chunk data not followed by CRLF", status, msg);
            d->state = CH_SIZE;
            break;
        case CH_TR_BOL:
        case CH_TR_NAME:
        case CH_TR_VALUE:
            if (++d->trailer_bytes > d->trailer_max)
                return ch_fail(d, 431, "trailer section too large", status, msg);
            if (ch == '\r') {
                if (d->state == CH_TR_BOL) {
                    d->state = CH_END_LF;
                } else if (d->state == CH_TR_NAME) {
                    return ch_fail(d, 400, "malformed trailer line", status, msg);
                } else {
                    d->state = CH_TR_LF;
                }
            } else if (d->state == CH_TR_VALUE) {
                if (ch == '\n')
                    return ch_fail(d, 400, "trailer line not ended by CRLF", status, msg);
                if (is_bad_ctl(ch))
                    return ch_fail(d, 400, "control byte in a trailer", status, msg);
            } else if (ch == ':' && d->state == CH_TR_NAME) {
                if (tr_framing(d))
                    return ch_fail(d, 400, "framing field in the trailer section", status, msg);
                d->state = CH_TR_VALUE;
            } else if (hp_tchar(ch)) {
                if (d->state == CH_TR_BOL) {
                    d->line = 0;
                    d->tr_match = (1u << TR_FRAMING_N) - 1;
                }
                tr_name_byte(d, ch);
                d->state = CH_TR_NAME;
            } else {
                return ch_fail(d, 400, "malformed trailer line", status, msg);
            }
            break;
        case CH_TR_LF:
            if (ch != '\n')
                return ch_fail(d, 400, "malformed trailer line", status, msg);
            d->state = CH_TR_BOL;
            break;
        case CH_END_LF:
            if (ch != '\n')
                return ch_fail(d, 400, "malformed end of a chunked body", status, msg);
            d->state = CH_DONE;
            *used = off;
            return HP_CH_DONE;
        default:
            return ch_fail(d, 400, "malformed chunked body", status, msg);
        }
    }
    *used = off;
    return HP_CH_MORE;
}
