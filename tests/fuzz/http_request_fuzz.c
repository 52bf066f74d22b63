/* libFuzzer target: router-svc's request framing (hparse) driven as its HTTP server drives it
 * (hp_conn.c: reads into a bounded buffer, the head scanned again from the request's first byte
 * on every read, parsed in place, the body by Content-Length or chunked in pieces, pipelined
 * requests one after another, a 16 KiB head cap answered 431).
 *
 * The input is the byte stream of one connection. It is fed twice: in reads as large as the
 * server takes them, and in reads whose sizes come from the input's own first bytes (1 to 64
 * bytes mostly, now and then a few KiB). Properties, abort() on violation:
 * - the two feeds give the same transcript: each request's status (accepted, or 400/431/501/505
 *   with its message), method, path, query, version, keep-alive, framing, header lines and
 *   values, body bytes, where each request ends, and where and how the stream stops;
 * - the body delivered never exceeds Content-Length, nor what was fed to the chunked decoder,
 *   and every pointer hparse returns lies in the buffer it was given (checked in hp_conn.c);
 * - nothing is read outside the buffers: each is allocated to its exact size (ASan). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hp_conn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SPLIT_SEED_BYTES 16u /* the input's first bytes that choose the read sizes */
#define SPLIT_PIECES 64u     /* read sizes in one schedule (cycled) */

/* A transcript of what the model reported, bounded by a capacity fixed from the input's size. */
struct log {
    unsigned char *p;
    size_t n;
    size_t cap;
    size_t body_len_at; /* offset of the open body record's length, or SIZE_MAX */
};

static void put(struct log *l, const void *p, size_t n)
{
    if (n > l->cap - l->n) {
        fprintf(stderr, "http_request_fuzz: transcript over its capacity (%zu)\n", l->cap);
        abort();
    }
    memcpy(l->p + l->n, p, n);
    l->n += n;
}

static void put_u64(struct log *l, uint64_t v)
{
    put(l, &v, sizeof(v));
}

static void put_str(struct log *l, const char *s)
{
    put(l, s, strlen(s) + 1);
}

static void log_head(void *cls, const struct hp_request *req, const char *h, uint64_t start,
                     uint64_t end)
{
    struct log *l = cls;
    const char *host = hp_header(req, "host");

    (void)h;
    l->body_len_at = SIZE_MAX;
    put(l, "H", 1);
    put_u64(l, start);
    put_u64(l, end);
    put_u64(l, (uint64_t)req->minor << 24 | (uint64_t)req->keep_alive << 16 |
                   (uint64_t)req->chunked << 8 | (uint64_t)req->has_length);
    put_u64(l, req->content_length);
    put_str(l, req->method);
    put_str(l, req->path);
    put(l, req->query != NULL ? "q" : "-", 1);
    if (req->query != NULL)
        put_str(l, req->query);
    put_u64(l, req->nh);
    for (unsigned i = 0; i < req->nh; i++) {
        put_str(l, req->kv[i].k);
        put_str(l, req->kv[i].v);
    }
    put_str(l, host != NULL ? host : "(none)");
}

static void log_body(void *cls, const char *p, size_t n)
{
    struct log *l = cls;
    uint64_t len;

    /* one record per request however the bytes were split: the length is updated in place */
    if (l->body_len_at == SIZE_MAX) {
        put(l, "B", 1);
        l->body_len_at = l->n;
        put_u64(l, 0);
    }
    memcpy(&len, l->p + l->body_len_at, sizeof(len));
    len += n;
    memcpy(l->p + l->body_len_at, &len, sizeof(len));
    put(l, p, n);
}

static int log_done(void *cls, uint64_t end)
{
    struct log *l = cls;

    l->body_len_at = SIZE_MAX;
    put(l, "D", 1);
    put_u64(l, end);
    return 0;
}

static void log_reject(void *cls, int status, const char *msg)
{
    struct log *l = cls;

    l->body_len_at = SIZE_MAX;
    put(l, "R", 1);
    put_u64(l, (uint64_t)status);
    put_str(l, msg);
}

static const struct hpc_ops log_ops = {log_head, log_body, log_done, log_reject};

/* Bounds: a head's strings with their NULs, and the Host value again, fit in three times its
 * bytes; a request's fixed records take under 80 bytes and need at least 14 bytes of input
 * ("A * HTTP/1.0\n\n"); the body bytes are input bytes; the last records under 128 bytes. */
static size_t log_cap(size_t size)
{
    return 512 + 10 * size;
}

static void run(struct log *l, const char *s, size_t n, const size_t *pieces, size_t np)
{
    struct hpc_result res;

    l->n = 0;
    l->body_len_at = SIZE_MAX;
    hpc_run(s, n, pieces, np, &log_ops, l, &res);
    put(l, "E", 1);
    put_u64(l, (uint64_t)res.end);
    put_u64(l, res.pending);
    put_u64(l, res.requests);
}

static void first_difference(const struct log *a, const struct log *b)
{
    size_t i = 0;

    while (i < a->n && i < b->n && a->p[i] == b->p[i])
        i++;
    fprintf(stderr,
            "http_request_fuzz: whole and split feeds differ at transcript byte %zu "
            "(lengths %zu, %zu)\n",
            i, a->n, b->n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct log whole = {NULL, 0, 0, SIZE_MAX};
    struct log split = {NULL, 0, 0, SIZE_MAX};
    size_t pieces[SPLIT_PIECES];
    size_t seed = size < SPLIT_SEED_BYTES ? size : SPLIT_SEED_BYTES;
    char *s = malloc(size > 0 ? size : 1);

    whole.cap = split.cap = log_cap(size);
    whole.p = malloc(whole.cap);
    split.p = malloc(split.cap);
    if (s == NULL || whole.p == NULL || split.p == NULL)
        abort();
    if (size > 0)
        memcpy(s, data, size);
    for (size_t i = 0; i < SPLIT_PIECES; i++) {
        unsigned b = seed > 0 ? data[i % seed] : 0;

        b = (b * 31u + (unsigned)i * 17u) & 0xffu;
        pieces[i] = b < 0xf0 ? 1 + b % 64 : 1 + (b - 0xf0) * 1024;
    }
    run(&whole, s, size, NULL, 0);
    run(&split, s, size, pieces, SPLIT_PIECES);
    if (whole.n != split.n || memcmp(whole.p, split.p, whole.n) != 0) {
        first_difference(&whole, &split);
        abort();
    }
    free(split.p);
    free(whole.p);
    free(s);
    return 0;
}
