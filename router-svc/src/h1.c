#include "h1.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    ST_STATUS = 0,
    ST_HEADER,
    ST_BODY_LEN,
    ST_BODY_EOF,
    ST_CHUNK_SIZE,
    ST_CHUNK_DATA,
    ST_CHUNK_END,
    ST_TRAILER,
    ST_DONE
};

void h1_init(struct h1_parser *p)
{
    memset(p, 0, sizeof(*p));
    p->content_length = -1;
    p->retry_after_s = -1;
}

void h1_reset(struct h1_parser *p)
{
    free(p->line);
    h1_init(p);
}

int h1_started(const struct h1_parser *p)
{
    return p->started;
}

static size_t fail(struct h1_event *ev, const char *why, size_t used)
{
    ev->kind = H1_ERROR;
    ev->err = why;
    return used;
}

/* Next line (without CRLF; a bare LF is accepted) into *line and *len. Returns 1 with *used set
 * when a line is whole, 0 when every byte went into the partial buffer, -1 when the line is
 * longer than cap or memory ran out. */
static int take_line(struct h1_parser *p, const char *buf, size_t n, size_t cap, size_t *used,
                     const char **line, size_t *len)
{
    const char *nl = memchr(buf, '\n', n);
    size_t take = nl != NULL ? (size_t)(nl - buf) + 1 : n;

    if (p->line_len + take > cap)
        return -1; /* the same limit whether the line came whole or in pieces */
    if (p->line == NULL && nl != NULL) {
        *line = buf;
        *len = take - 1;
    } else {
        if (p->line == NULL) {
            p->line = malloc(cap);
            if (p->line == NULL)
                return -1;
        }
        memcpy(p->line + p->line_len, buf, take);
        p->line_len += take;
        *used = take;
        if (nl == NULL)
            return 0;
        *line = p->line;
        *len = p->line_len - 1;
    }
    *used = take;
    if (*len > 0 && (*line)[*len - 1] == '\r')
        (*len)--;
    return 1;
}

static void line_done(struct h1_parser *p)
{
    free(p->line);
    p->line = NULL;
    p->line_len = 0;
}

/* case-insensitive: does the comma-separated list v contain token tok? */
static int has_token(const char *v, size_t vlen, const char *tok)
{
    size_t tlen = strlen(tok);
    size_t i = 0;

    while (i < vlen) {
        size_t s, e;

        while (i < vlen && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        s = i;
        while (i < vlen && v[i] != ',')
            i++;
        e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tlen && strncasecmp(v + s, tok, tlen) == 0)
            return 1;
    }
    return 0;
}

static int parse_status(struct h1_parser *p, const char *l, size_t len)
{
    if (len < 12 || memcmp(l, "HTTP/1.", 7) != 0 || (l[7] != '0' && l[7] != '1') || l[8] != ' ')
        return -1;
    for (int i = 9; i < 12; i++) {
        if (l[i] < '0' || l[i] > '9')
            return -1;
    }
    if (len > 12 && l[12] != ' ')
        return -1;
    p->minor = l[7] - '0';
    p->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    if (p->status < 100)
        return -1;
    p->keep_alive = p->minor == 1;
    p->chunked = 0;
    p->content_length = -1;
    p->retry_after_s = -1;
    p->no_body = p->status == 204 || p->status == 304;
    return 0;
}

static int parse_header(struct h1_parser *p, const char *l, size_t len, const char **err)
{
    const char *colon = memchr(l, ':', len);
    size_t nlen, vlen;
    const char *v;

    if (colon == NULL || colon == l) {
        *err = "malformed response header line";
        return -1;
    }
    nlen = (size_t)(colon - l);
    if (l[nlen - 1] == ' ' || l[nlen - 1] == '\t') {
        *err = "whitespace before a response header's colon";
        return -1;
    }
    v = colon + 1;
    vlen = len - nlen - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    if (nlen == 14 && strncasecmp(l, "content-length", 14) == 0) {
        uint64_t x = 0;

        if (vlen == 0 || vlen > 18) {
            *err = "invalid Content-Length";
            return -1;
        }
        for (size_t i = 0; i < vlen; i++) {
            if (v[i] < '0' || v[i] > '9') {
                *err = "invalid Content-Length";
                return -1;
            }
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        if (p->content_length >= 0 && (uint64_t)p->content_length != x) {
            *err = "conflicting Content-Length headers";
            return -1;
        }
        p->content_length = (int64_t)x;
    } else if (nlen == 17 && strncasecmp(l, "transfer-encoding", 17) == 0) {
        /* we never ask for a content coding: only chunked (alone) is understood */
        if (vlen == 7 && strncasecmp(v, "chunked", 7) == 0) {
            p->chunked = 1;
        } else if (!(vlen == 8 && strncasecmp(v, "identity", 8) == 0)) {
            *err = "unsupported Transfer-Encoding";
            return -1;
        }
    } else if (nlen == 10 && strncasecmp(l, "connection", 10) == 0) {
        if (has_token(v, vlen, "close"))
            p->keep_alive = 0;
        else if (has_token(v, vlen, "keep-alive"))
            p->keep_alive = 1;
    } else if (nlen == 11 && strncasecmp(l, "retry-after", 11) == 0) {
        long x = 0;
        size_t i;

        for (i = 0; i < vlen && i < 6 && v[i] >= '0' && v[i] <= '9'; i++)
            x = x * 10 + (v[i] - '0');
        if (i > 0 && i == vlen && x < 86400)
            p->retry_after_s = x;
    }
    return 0;
}

/* The header section ended: pick the body framing. Returns the event kind. */
static enum h1_kind headers_end(struct h1_parser *p)
{
    if (p->status < 200) {
        /* interim response (100 Continue, 103 Early Hints): the real one follows */
        p->state = ST_STATUS;
        p->header_bytes = 0;
        return H1_NEED_MORE;
    }
    if (p->no_body) {
        p->state = ST_DONE;
    } else if (p->chunked) {
        p->content_length = -1; /* chunked wins over a length (RFC 9112 6.3) */
        p->state = ST_CHUNK_SIZE;
    } else if (p->content_length >= 0) {
        p->left = (uint64_t)p->content_length;
        p->state = p->left > 0 ? ST_BODY_LEN : ST_DONE;
    } else {
        p->state = ST_BODY_EOF;
        p->keep_alive = 0;
    }
    return H1_HEADERS;
}

static int parse_chunk_size(struct h1_parser *p, const char *l, size_t len)
{
    uint64_t x = 0;
    size_t i;

    for (i = 0; i < len && i < 16; i++) {
        char c = l[i];
        int d;

        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            break;
        x = x * 16 + (uint64_t)d;
    }
    if (i == 0 || (i < len && l[i] != ';' && l[i] != ' ' && l[i] != '\t'))
        return -1;
    p->left = x;
    return 0;
}

size_t h1_feed(struct h1_parser *p, const char *buf, size_t n, struct h1_event *ev)
{
    size_t used = 0;

    ev->kind = H1_NEED_MORE;
    ev->p = NULL;
    ev->n = 0;
    ev->err = NULL;
    while (used < n) {
        const char *l = NULL;
        size_t len = 0, took = 0;
        int r;

        switch (p->state) {
        case ST_STATUS:
        case ST_HEADER:
        case ST_TRAILER:
            p->started = 1;
            r = take_line(p, buf + used, n - used, H1_LINE_MAX, &took, &l, &len);
            if (r < 0)
                return fail(ev,
                            p->state == ST_TRAILER ? "response trailer line too long"
                                                   : "response header line too long",
                            used);
            used += took;
            if (p->state != ST_TRAILER) {
                p->header_bytes += took;
                if (p->header_bytes > H1_HEADERS_MAX)
                    return fail(ev, "response headers too large", used);
            }
            if (r == 0)
                return used;
            if (p->state == ST_STATUS) {
                /* bytes of the whole line, also when it came in pieces over several feeds */
                size_t line_bytes = l == p->line ? p->line_len : took;

                if (len == 0 && p->status == 0 && p->header_bytes == line_bytes) {
                    /* tolerate a stray empty line before the status line */
                    line_done(p);
                    p->header_bytes = 0;
                    continue;
                }
                r = parse_status(p, l, len);
                line_done(p);
                if (r != 0)
                    return fail(ev, "malformed status line", used);
                p->state = ST_HEADER;
            } else if (p->state == ST_HEADER) {
                const char *err = NULL;

                if (len == 0) {
                    enum h1_kind k;

                    line_done(p);
                    k = headers_end(p);
                    if (k == H1_HEADERS) {
                        ev->kind = H1_HEADERS;
                        return used;
                    }
                    continue;
                }
                if (l[0] == ' ' || l[0] == '\t') {
                    line_done(p);
                    return fail(ev, "folded response header line", used);
                }
                r = parse_header(p, l, len, &err);
                line_done(p);
                if (r != 0)
                    return fail(ev, err, used);
            } else {
                line_done(p);
                if (len == 0) {
                    p->state = ST_DONE;
                    ev->kind = H1_DONE;
                    return used;
                }
            }
            break;
        case ST_BODY_LEN:
        case ST_CHUNK_DATA: {
            size_t take = n - used;

            if ((uint64_t)take > p->left)
                take = (size_t)p->left;
            ev->kind = H1_BODY;
            ev->p = buf + used;
            ev->n = take;
            p->left -= take;
            used += take;
            if (p->left == 0)
                p->state = p->state == ST_BODY_LEN ? ST_DONE : ST_CHUNK_END;
            return used;
        }
        case ST_BODY_EOF:
            ev->kind = H1_BODY;
            ev->p = buf + used;
            ev->n = n - used;
            return n;
        case ST_CHUNK_SIZE:
        case ST_CHUNK_END:
            r = take_line(p, buf + used, n - used, H1_LINE_MAX, &took, &l, &len);
            if (r < 0)
                return fail(ev, "chunk size line too long", used);
            used += took;
            if (r == 0)
                return used;
            if (p->state == ST_CHUNK_END) {
                line_done(p);
                if (len != 0)
                    return fail(ev, "chunk data longer than its size", used);
                p->state = ST_CHUNK_SIZE;
                break;
            }
            r = parse_chunk_size(p, l, len);
            line_done(p);
            if (r != 0)
                return fail(ev, "malformed chunk size", used);
            p->state = p->left == 0 ? ST_TRAILER : ST_CHUNK_DATA;
            break;
        case ST_DONE:
        default:
            break;
        }
        if (p->state == ST_DONE) {
            ev->kind = H1_DONE;
            return used;
        }
    }
    if (p->state == ST_DONE)
        ev->kind = H1_DONE;
    return used;
}

enum h1_drain h1_drain(struct h1_parser *p, const char *buf, size_t n)
{
    for (;;) {
        struct h1_event ev;
        size_t used = h1_feed(p, buf, n, &ev);

        buf += used;
        n -= used;
        switch (ev.kind) {
        case H1_NEED_MORE:
            return H1_DRAIN_MORE;
        case H1_HEADERS:
            if (!p->keep_alive)
                return H1_DRAIN_CLOSE; /* its end would be the close: no use reading on */
            continue;
        case H1_BODY:
            continue;
        case H1_DONE:
            return p->keep_alive && n == 0 ? H1_DRAIN_KEEP : H1_DRAIN_CLOSE;
        case H1_ERROR:
        default:
            return H1_DRAIN_BAD;
        }
    }
}

enum h1_kind h1_eof(struct h1_parser *p, struct h1_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    if (p->state == ST_BODY_EOF || p->state == ST_DONE) {
        p->state = ST_DONE;
        ev->kind = H1_DONE;
        return H1_DONE;
    }
    ev->kind = H1_ERROR;
    ev->err = p->started ? "connection closed before the response ended"
                         : "connection closed before a response";
    return H1_ERROR;
}
