/* hp_conn: hsrv's connection handling around hparse, as a model for the fuzz targets. The
 * structure follows hsrv.c's process() (one request after another in the buffer), chunked_feed()
 * and conn_read()/keep_tail() (reads into a bounded buffer, the unused tail kept). */
#include "hp_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: keep the empty lines before a request line in the buffer until the head is done, as hsrv
 * does today (-DHPC_KEEP_EMPTY_LINES=1 shows that its 431 then depends on the split). */
#ifndef HPC_KEEP_EMPTY_LINES
#define HPC_KEEP_EMPTY_LINES 0
#endif

enum { C_HEAD, C_BODY, C_END };

struct conn {
    const struct hpc_ops *ops;
    void *cls;
    int state; /* C_* */
    int end;   /* HPC_END_* once state is C_END */
    struct hp_scan scan;
    struct hp_request req;
    int keep_alive; /* of the current request */
    int chunked;
    uint64_t body_left;   /* bytes of a Content-Length body still to come */
    uint64_t body_got;    /* body bytes delivered for the current request */
    uint64_t chunked_fed; /* bytes handed to hp_chunked_feed for the current request */
    struct hp_chunked ch;
    uint64_t base; /* stream offset of buf[0] in process() */
    unsigned requests;
};

static void fail(const char *what)
{
    fprintf(stderr, "hp_conn: property violated: %s\n", what);
    abort();
}

/* p lies in [lo, lo + n] (a NUL-terminated string ending inside it) */
static void check_str(const char *p, const char *lo, size_t n, const char *what)
{
    if (p < lo || p > lo + n)
        fail(what);
    if (memchr(p, '\0', (size_t)(lo + n - p) + 1) == NULL)
        fail(what);
}

static void reject(struct conn *c, int status, const char *msg)
{
    if (status != 400 && status != 431 && status != 501 && status != 505)
        fail("reject status not one of 400, 431, 501, 505");
    if (msg == NULL || msg[0] == '\0')
        fail("reject without a message");
    if (c->ops->reject != NULL)
        c->ops->reject(c->cls, status, msg);
    c->state = C_END;
    c->end = HPC_END_REJECT;
}

/* The current request's body ended at stream offset end. */
static void complete(struct conn *c, uint64_t end)
{
    int stop = 0;

    if (c->ops->done != NULL)
        stop = c->ops->done(c->cls, end);
    if (stop) {
        c->state = C_END;
        c->end = HPC_END_STOPPED;
    } else if (!c->keep_alive) {
        c->state = C_END;
        c->end = HPC_END_CLOSE;
    } else {
        c->state = C_HEAD;
        hp_scan_reset(&c->scan);
    }
}

static void deliver(struct conn *c, const char *p, size_t n)
{
    c->body_got += n;
    if (!c->chunked && c->body_got > c->req.content_length)
        fail("more body bytes than Content-Length");
    if (c->chunked && c->body_got > c->chunked_fed)
        fail("more chunked body bytes than were fed");
    if (c->ops->body != NULL && n > 0)
        c->ops->body(c->cls, p, n);
}

/* hsrv's head_parse: a copy of the head (exactly n + 1 bytes: hparse writes a NUL at h[n]) and a
 * table of kv_cap entries sized as hsrv sizes it (the lines of the head, at most
 * HP_HEADERS_MAX). Returns 0 (the head callback has run) or the status. */
static int head_parse(struct conn *c, const char *p, size_t n, uint64_t start, const char **msg)
{
    size_t lines = 0;
    unsigned kv_cap;
    char *h = malloc(n + 1);
    struct hp_kv *kv;
    int rc;

    for (size_t i = 0; i < n; i++)
        lines += p[i] == '\n';
    kv_cap = (unsigned)(lines < HP_HEADERS_MAX ? lines + 1 : HP_HEADERS_MAX);
    kv = malloc(kv_cap * sizeof(*kv));
    if (h == NULL || kv == NULL)
        fail("out of memory");
    memcpy(h, p, n);
    rc = hp_head_parse(h, n, kv, kv_cap, &c->req, msg);
    if (rc != 0)
        goto out;
    check_str(c->req.method, h, n, "method outside the head");
    if (c->req.path != NULL && strcmp(c->req.path, "/") == 0 &&
        (c->req.path < h || c->req.path > h + n)) {
        /* hparse.h: "/" for an absolute form without a path (its own constant) */
    } else {
        check_str(c->req.path, h, n, "path outside the head");
    }
    if (c->req.query != NULL)
        check_str(c->req.query, h, n, "query outside the head");
    if (c->req.nh > kv_cap || c->req.kv != kv)
        fail("header table overrun");
    for (unsigned i = 0; i < c->req.nh; i++) {
        check_str(kv[i].k, h, n, "header name outside the head");
        check_str(kv[i].v, h, n, "header value outside the head");
        if (hp_header(&c->req, kv[i].k) == NULL)
            fail("hp_header misses a header of the table");
    }
    if (c->req.chunked && c->req.has_length)
        fail("chunked and Content-Length both accepted");
    if (c->ops->head != NULL)
        c->ops->head(c->cls, &c->req, h, start, start + n);
out:
    free(kv);
    free(h);
    return rc;
}

/* hsrv's chunked_feed: returns the bytes used. at: the stream offset of buf[0]. */
static size_t chunked_feed(struct conn *c, const char *buf, size_t len, uint64_t at)
{
    size_t off = 0;

    while (off < len && c->state == C_BODY) {
        const char *data = NULL;
        const char *msg = NULL;
        size_t used = 0, dlen = 0;
        int status = 0;
        int r = hp_chunked_feed(&c->ch, buf + off, len - off, &used, &data, &dlen, &status, &msg);

        if (used > len - off)
            fail("hp_chunked_feed used more than it was given");
        c->chunked_fed += used;
        off += used;
        if (r < 0) {
            reject(c, status, msg);
            return len;
        }
        if (r == HP_CH_DATA) {
            if (dlen == 0 || data < buf + off - used || data + dlen > buf + off)
                fail("chunk data outside the bytes used");
            deliver(c, data, dlen);
            continue;
        }
        if (r == HP_CH_DONE) {
            complete(c, at + off);
            return off;
        }
        if (r != HP_CH_MORE || off != len)
            fail("hp_chunked_feed: MORE without using everything");
        break;
    }
    return off;
}

/* hsrv's process(): returns the bytes of buf used; the rest waits for more. */
static size_t process(struct conn *c, const char *buf, size_t len)
{
    size_t off = 0;

    while (c->state == C_HEAD || c->state == C_BODY) {
        if (c->state == C_HEAD) {
            size_t hs = 0, he = 0;
            const char *msg = NULL;
            int st;

            if (off == len)
                break;
            st = hp_head_scan(&c->scan, buf + off, len - off, HPC_HEAD_MAX_BYTES, &hs, &he, &msg);
            if (st == HP_SCAN_MORE) {
                if (c->scan.prefix) {
                    /* only empty lines so far: hsrv drops them, between requests */
                    off = len;
                    hp_scan_reset(&c->scan);
                    break;
                }
                if (c->scan.start > 0 && !HPC_KEEP_EMPTY_LINES) {
                    /* The empty lines before the request line are dropped now, not kept in the
                     * buffer (hsrv keeps them until the head is done: with up to a head's worth
                     * of them its buffer fills, a 431, only when they arrived with the head). */
                    off += c->scan.start;
                    c->scan.off -= c->scan.start;
                    c->scan.start = 0;
                }
                break;
            }
            if (st != HP_SCAN_DONE) {
                if (st != HP_SCAN_BAD && st != HP_SCAN_LARGE)
                    fail("hp_head_scan: unknown result");
                reject(c, st == HP_SCAN_LARGE ? 431 : 400, msg);
                off = len;
                break;
            }
            if (hs >= he || he > len - off)
                fail("hp_head_scan: head outside the buffer");
            st = head_parse(c, buf + off + hs, he - hs, c->base + off + hs, &msg);
            off += he;
            hp_scan_reset(&c->scan);
            if (st != 0) {
                reject(c, st, msg);
                off = len;
                break;
            }
            c->requests++;
            c->state = C_BODY;
            c->keep_alive = c->req.keep_alive;
            c->chunked = c->req.chunked;
            c->body_left = c->chunked ? 0 : c->req.content_length;
            c->body_got = 0;
            c->chunked_fed = 0;
            if (c->chunked)
                hp_chunked_init(&c->ch, HPC_HEAD_MAX_BYTES);
            if (!c->chunked && c->body_left == 0)
                complete(c, c->base + off);
            continue;
        }
        /* C_BODY */
        if (off == len)
            break;
        if (c->chunked) {
            off += chunked_feed(c, buf + off, len - off, c->base + off);
        } else {
            size_t take = len - off;

            if (take > c->body_left)
                take = (size_t)c->body_left;
            c->body_left -= take;
            deliver(c, buf + off, take);
            off += take;
            if (c->body_left == 0)
                complete(c, c->base + off);
        }
    }
    if (c->state == C_END)
        off = len;
    return off;
}

void hpc_run(const char *stream, size_t len, const size_t *pieces, size_t npieces,
             const struct hpc_ops *ops, void *cls, struct hpc_result *res)
{
    struct conn c;
    char *buf = NULL; /* the unused bytes, in a block of exactly their size */
    size_t have = 0;
    size_t pos = 0;
    size_t piece = 0;

    memset(&c, 0, sizeof(c));
    c.ops = ops;
    c.cls = cls;
    c.state = C_HEAD;
    hp_scan_reset(&c.scan);
    while (c.state != C_END && pos < len) {
        size_t limit, n, used;
        char *nb;

        /* hsrv reads into its scratch when nothing is kept, else into rbuf up to its cap */
        limit = have > 0 ? HPC_RBUF_CAP_BYTES - have : HPC_SCRATCH_BYTES;
        if (have > 0 && have >= HPC_RBUF_CAP_BYTES) {
            reject(&c, 431, "request headers too large");
            break;
        }
        n = len - pos;
        if (n > limit)
            n = limit;
        if (npieces > 0 && n > pieces[piece % npieces])
            n = pieces[piece % npieces];
        piece++;
        if (n == 0)
            n = 1;
        nb = malloc(have + n);
        if (nb == NULL)
            fail("out of memory");
        if (have > 0)
            memcpy(nb, buf, have);
        memcpy(nb + have, stream + pos, n);
        free(buf);
        buf = nb;
        have += n;
        pos += n;
        c.base = pos - have;
        used = process(&c, buf, have);
        if (used > have)
            fail("process used more than it had");
        if (c.state == C_END) {
            have = 0;
            break;
        }
        /* keep_tail: the unused bytes, in a block of their size */
        nb = NULL;
        if (have - used > 0) {
            nb = malloc(have - used);
            if (nb == NULL)
                fail("out of memory");
            memcpy(nb, buf + used, have - used);
        }
        free(buf);
        buf = nb;
        have -= used;
    }
    free(buf);
    memset(res, 0, sizeof(*res));
    res->requests = c.requests;
    res->read = pos;
    res->pending = have;
    if (c.state == C_END)
        res->end = c.end;
    else if (c.state == C_BODY)
        res->end = HPC_END_BODY;
    else
        res->end = have > 0 ? HPC_END_HEAD : HPC_END_IDLE;
}
