/* libFuzzer target: router-svc's server taking a request head (hs_request.c, hs_head_take) as
 * hsrv does after hp_head_scan delimited it: the copy into a cached block (TG_BLOCK_HEAD) or a
 * malloc'd buffer by its size, the in-place parse, the table of header lines and query
 * arguments, and its release (hs_head_release).
 *
 * The input is the bytes of a connection; the first head hp_head_scan finds in them (16 KiB
 * cap, as the server's default) is taken twice on the same connection, released in between, so
 * that the second take gets the block the first gave back. Properties, abort() on violation:
 * - both takes give the same answer (status, message, method, path, header and argument count);
 * - a head taken as a block fits it, copy and table;
 * - every header name and value and every query argument lies in the head's copy (an argument
 *   without '=' has the empty value, a static ""), and
 *   hs_query_arg finds each argument's first value by its name;
 * - nothing is read or written outside the buffers (ASan; a block given back is poisoned). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hparse.h"
#include "hsrv_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEAD_MAX (16u * 1024u)

struct took {
    int st;
    const char *msg;
    char method[32], path[64];
    unsigned nh, na;
};

static int inside(const struct hs_conn *c, const char *p)
{
    return p >= c->head && p <= c->head + c->head_bytes;
}

static void take(struct hs_conn *c, const char *p, size_t n, struct took *t)
{
    t->msg = "";
    t->st = hs_head_take(c, p, n, &t->msg);
    snprintf(t->method, sizeof(t->method), "%s", c->method != NULL ? c->method : "");
    snprintf(t->path, sizeof(t->path), "%s", c->url != NULL ? c->url : "");
    t->nh = t->st == 0 ? c->nh : 0;
    t->na = t->st == 0 ? c->na : 0;
    if (c->head == NULL)
        return;
    if (t->st == 0) {
        for (unsigned i = 0; i < c->nh + c->na; i++) {
            /* an argument without '=' has the value "", not in the head */
            if (!inside(c, c->kv[i].k) || (!inside(c, c->kv[i].v) && c->kv[i].v[0] != '\0'))
                abort();
        }
        for (unsigned i = c->nh; i < c->nh + c->na; i++) {
            const char *v = hs_query_arg(c, c->kv[i].k);
            unsigned first = c->nh;

            while (strcmp(c->kv[first].k, c->kv[i].k) != 0)
                first++;
            if (v != c->kv[first].v)
                abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hs_server srv;
    struct hs_conn *c = calloc(1, sizeof(*c));
    struct hp_scan scan;
    struct took a, b;
    size_t hs = 0, he = 0;
    const char *msg = NULL;

    if (c == NULL)
        return 0;
    srv.head_max = HEAD_MAX;
    c->s = &srv;
    hp_scan_reset(&scan);
    if (hp_head_scan(&scan, (const char *)data, size, HEAD_MAX, &hs, &he, &msg) != HP_SCAN_DONE) {
        free(c);
        return 0;
    }
    take(c, (const char *)data + hs, he - hs, &a);
    /* a block holds the copy with its NUL and the table after it */
    if (c->head != NULL && c->head_block &&
        c->head_bytes + 1 + (size_t)(c->nh + c->na) * sizeof(struct hp_kv) > HS_HEAD_BLOCK_BYTES)
        abort();
    hs_head_release(c);
    if (c->head != NULL || c->head_block)
        abort();
    memset(c, 0, sizeof(*c));
    c->s = &srv;
    take(c, (const char *)data + hs, he - hs, &b);
    hs_head_release(c);
    if (a.st != b.st || strcmp(a.msg, b.msg) != 0 || strcmp(a.method, b.method) != 0 ||
        strcmp(a.path, b.path) != 0 || a.nh != b.nh || a.na != b.na)
        abort();
    free(c);
    return 0;
}
