/* hs_request: a request's head taken from the connection's bytes (hparse), and its accessors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hsrv_int.h"
#include "tg_blocks.h"

/* Percent-decode s in place ('+' as a space when plus). Bad escapes stay as they are. */
static void pct_decode(char *s, int plus)
{
    char *o = s;

    for (char *p = s; *p != '\0'; p++) {
        if (*p == '%' && hp_hexval((unsigned char)p[1]) >= 0 &&
            hp_hexval((unsigned char)p[2]) >= 0) {
            *o++ = (char)(hp_hexval((unsigned char)p[1]) * 16 + hp_hexval((unsigned char)p[2]));
            p += 2;
        } else if (plus && *p == '+') {
            *o++ = ' ';
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

void *hs_conn_memo(struct hs_conn *c)
{
    return c->memo;
}

const char *hs_header(const struct hs_conn *c, const char *name)
{
    /* The first bytes are compared before the whole names: two bytes equal but for case are
     * equal with bit 0x20 set, so a header that differs there is not the one. */
    unsigned char first = (unsigned char)name[0] | 0x20;

    for (unsigned i = 0; i < c->nh; i++) {
        if (((unsigned char)c->kv[i].k[0] | 0x20) == first && strcasecmp(c->kv[i].k, name) == 0)
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

void hs_head_release(struct hs_conn *c)
{
    if (c->head_block)
        tg_blocks_put(TG_BLOCK_HEAD, c->head, HS_HEAD_BLOCK_BYTES);
    else
        free(c->head);
    c->head = NULL;
    c->head_block = 0;
}

/* The head delimited by hp_head_scan (n bytes at p) into c: a copy parsed in place, followed by
 * the table of its headers and query arguments. Returns 0, or the status to answer with (400,
 * 431, 501, 503, 505) and a message. */
int hs_head_take(struct hs_conn *c, const char *p, size_t n, const char **msg)
{
    size_t lines = 0, amps = 0;
    size_t table_off = (n + 1 + (_Alignof(struct hp_kv) - 1)) & ~(_Alignof(struct hp_kv) - 1);
    size_t slots;
    char *h;
    char *q;
    int rc;

    /* lines of the head, and "&" of the request line (the query's arguments are there; empty
     * lines may come before it) */
    {
        const char *e = p + n, *r = p, *eol;

        for (const char *x = p; (x = memchr(x, '\n', (size_t)(e - x))) != NULL; x++)
            lines++;
        while (r < e && (*r == '\r' || *r == '\n'))
            r++;
        eol = memchr(r, '\n', (size_t)(e - r));
        for (const char *a = r; (a = memchr(a, '&', (size_t)((eol != NULL ? eol : e) - a))) != NULL;
             a++)
            amps++;
    }
    slots = lines + amps + 2;
    c->head_block = table_off + slots * sizeof(struct hp_kv) <= HS_HEAD_BLOCK_BYTES;
    h = c->head_block ? tg_blocks_get(TG_BLOCK_HEAD, HS_HEAD_BLOCK_BYTES)
                      : malloc(table_off + slots * sizeof(struct hp_kv));
    if (h == NULL) {
        *msg = "out of memory";
        return 503;
    }
    memcpy(h, p, n);
    c->head = h;
    c->kv = (struct hp_kv *)(void *)(h + table_off);
    c->head_bytes = n;
    rc = hp_head_parse(h, n, c->kv, (unsigned)(lines < HP_HEADERS_MAX ? lines + 1 : HP_HEADERS_MAX),
                       &c->req, msg);
    if (c->req.method != NULL)
        c->minor = c->req.minor; /* an error is answered in the client's version */
    if (rc != 0)
        return rc;
    c->nh = c->req.nh;
    c->method = c->req.method;
    c->url = c->req.path;
    c->keep_alive = c->req.keep_alive;
    c->is_head = strcmp(c->method, "HEAD") == 0;
    c->chunked = c->req.chunked;
    c->body_left = c->chunked ? 0 : c->req.content_length;
    if (c->chunked)
        hp_chunked_init(&c->ch, c->s->head_max);

    /* query arguments, decoded in place after the headers in the table (the path is not) */
    q = (char *)(uintptr_t)c->req.query;
    while (q != NULL && *q != '\0' && c->nh + c->na < slots) {
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
