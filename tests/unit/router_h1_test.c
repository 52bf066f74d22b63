/* h1: the upstream HTTP/1.1 response parser, fed whole, byte by byte and cut in two at every
 * position: the outcome must never depend on how the bytes arrived. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "h1.h"

struct outcome {
    int headers; /* H1_HEADERS events */
    int status;
    int keep_alive;
    long retry_after_s;
    int done;
    int error;
    char err[96];
    char body[65536];
    size_t body_len;
    size_t used; /* bytes consumed up to DONE or ERROR */
};

/* Feed msg[0..len) in pieces ending at the offsets in cuts (ascending, the last == len),
 * then EOF when eof is set and the response is not done. */
static void run(const char *msg, size_t len, const size_t *cuts, size_t ncuts, int eof,
                struct outcome *o)
{
    struct h1_parser p;
    size_t at = 0;

    assert_true(ncuts == 0 ? len == 0 : cuts[ncuts - 1] == len);
    memset(o, 0, sizeof(*o));
    h1_init(&p);
    for (size_t k = 0; k < ncuts && !o->done && !o->error; k++) {
        const char *b = msg + at;
        size_t n = cuts[k] - at;

        at = cuts[k];
        for (;;) {
            struct h1_event ev;
            size_t u = h1_feed(&p, b, n, &ev);

            assert_true(u <= n);
            b += u;
            n -= u;
            o->used += u;
            if (ev.kind == H1_NEED_MORE) {
                assert_int_equal(n, 0);
                break;
            }
            if (ev.kind == H1_HEADERS) {
                o->headers++;
                o->status = p.status;
                o->retry_after_s = p.retry_after_s;
                continue;
            }
            if (ev.kind == H1_BODY) {
                assert_true(o->body_len + ev.n <= sizeof(o->body));
                memcpy(o->body + o->body_len, ev.p, ev.n);
                o->body_len += ev.n;
                continue;
            }
            if (ev.kind == H1_DONE) {
                o->done = 1;
                o->keep_alive = p.keep_alive;
                break;
            }
            o->error = 1;
            snprintf(o->err, sizeof(o->err), "%s", ev.err);
            break;
        }
    }
    if (eof && !o->done && !o->error) {
        struct h1_event ev;

        if (h1_eof(&p, &ev) == H1_DONE) {
            o->done = 1;
            o->keep_alive = 0;
        } else {
            o->error = 1;
            snprintf(o->err, sizeof(o->err), "%s", ev.err);
        }
    }
    h1_reset(&p);
}

static void same(const struct outcome *a, const struct outcome *b, const char *how)
{
    if (a->headers != b->headers || a->status != b->status || a->done != b->done ||
        a->error != b->error || a->keep_alive != b->keep_alive ||
        a->retry_after_s != b->retry_after_s || a->body_len != b->body_len ||
        memcmp(a->body, b->body, a->body_len) != 0 || strcmp(a->err, b->err) != 0 ||
        (a->done && a->used != b->used))
        fail_msg("outcome differs when fed %s: status %d/%d done %d/%d error %d/%d (%s / %s) "
                 "body %zu/%zu",
                 how, a->status, b->status, a->done, b->done, a->error, b->error, a->err, b->err,
                 a->body_len, b->body_len);
}

/* The outcome fed whole, checked against every other way of cutting the same bytes. */
static void check_all(const char *msg, int eof, struct outcome *whole)
{
    size_t len = strlen(msg);
    struct outcome *o = malloc(sizeof(*o));
    size_t *cuts = malloc((len + 1) * sizeof(*cuts));

    assert_non_null(o);
    assert_non_null(cuts);
    cuts[0] = len;
    run(msg, len, cuts, 1, eof, whole);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    run(msg, len, cuts, len, eof, o);
    same(whole, o, "byte by byte");
    for (size_t at = 1; at < len; at++) {
        size_t two[2] = {at, len};

        run(msg, len, two, 2, eof, o);
        same(whole, o, "in two pieces");
    }
    free(cuts);
    free(o);
}

static void test_content_length(void **state)
{
    struct outcome o;
    const char *m = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Content-Length: 11\r\n\r\n{\"ok\":true}";

    (void)state;
    check_all(m, 0, &o);
    assert_int_equal(o.status, 200);
    assert_true(o.done);
    assert_true(o.keep_alive);
    assert_int_equal(o.body_len, 11);
    assert_memory_equal(o.body, "{\"ok\":true}", 11);
    assert_int_equal(o.retry_after_s, -1);
}

static void test_chunked(void **state)
{
    struct outcome o;
    const char *m = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n"
                    "0\r\nX-Trailer: yes\r\n\r\n";

    (void)state;
    check_all(m, 0, &o);
    assert_true(o.done);
    assert_true(o.keep_alive);
    assert_int_equal(o.body_len, 16);
    assert_memory_equal(o.body, "hello 0123456789", 16);
    assert_int_equal(o.used, strlen(m));
}

static void test_close_delimited(void **state)
{
    struct outcome o;
    const char *m = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end";

    (void)state;
    check_all(m, 1, &o);
    assert_true(o.done);
    assert_false(o.keep_alive);
    assert_int_equal(o.body_len, 13);
    /* without EOF it is not done */
    check_all(m, 0, &o);
    assert_false(o.done);
    assert_false(o.error);
}

static void test_interim_and_no_body(void **state)
{
    struct outcome o;

    (void)state;
    check_all("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
              "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
              0, &o);
    assert_int_equal(o.headers, 1);
    assert_int_equal(o.status, 201);
    assert_int_equal(o.body_len, 2);
    check_all("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", 0, &o);
    assert_true(o.done);
    assert_int_equal(o.status, 204);
    assert_int_equal(o.body_len, 0);
    check_all("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, &o);
    assert_true(o.done);
    assert_int_equal(o.body_len, 0);
}

static void test_connection_and_retry_after(void **state)
{
    struct outcome o;

    (void)state;
    check_all("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nConnection: close\r\n"
              "Content-Length: 2\r\n\r\n{}",
              0, &o);
    assert_int_equal(o.status, 429);
    assert_int_equal(o.retry_after_s, 7);
    assert_false(o.keep_alive);
    check_all("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", 0, &o);
    assert_false(o.keep_alive);
    check_all("HTTP/1.0 200 OK\r\nconnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n{}", 0, &o);
    assert_true(o.keep_alive);
    /* a date is not a number of seconds: absent */
    check_all("HTTP/1.1 503 x\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n"
              "Content-Length: 0\r\n\r\n",
              0, &o);
    assert_int_equal(o.retry_after_s, -1);
    /* bare LF line ends are accepted */
    check_all("HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", 0, &o);
    assert_true(o.done);
    assert_int_equal(o.body_len, 3);
}

static void expect_error(const char *m, int eof, const char *why)
{
    struct outcome o;

    check_all(m, eof, &o);
    assert_true(o.error);
    assert_false(o.done);
    if (strstr(o.err, why) == NULL)
        fail_msg("error \"%s\" does not name \"%s\"", o.err, why);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("FOO 200\r\n\r\n", 0, "status line");
    expect_error("HTTP/2 200\r\n\r\n", 0, "status line");
    expect_error("HTTP/1.1 2x0 OK\r\n\r\n", 0, "status line");
    expect_error("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", 0, "header line");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 0,
                 "conflicting Content-Length");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "Content-Length");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0,
                 "Transfer-Encoding");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "chunk size");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 0,
                 "chunk data longer");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 1, "closed before");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 1,
                 "closed before");
    expect_error("", 1, "before a response");
}

/* Header lines and sections over their caps fail whatever the pieces, and never buffer more
 * than the cap. */
/* An empty line before the status line is tolerated whole; it was refused ("malformed status
 * line") when its CR and LF arrived in two reads (found by h1_response_fuzz). */
static void test_stray_empty_line_split_across_reads(void **state)
{
    struct outcome o;

    (void)state;
    check_all("\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 0, &o);
    assert_true(o.done);
    assert_false(o.error);
    assert_int_equal(o.status, 200);
    assert_int_equal(o.body_len, 1);
    check_all("\nHTTP/1.1 204 No Content\r\n\r\n", 0, &o);
    assert_true(o.done);
    assert_int_equal(o.status, 204);
}

static void test_limits(void **state)
{
    size_t big = H1_LINE_MAX + 64;
    char *m = malloc(big + 64);
    struct outcome o;
    size_t len;
    struct h1_parser p;

    (void)state;
    assert_non_null(m);
    len = (size_t)sprintf(m, "HTTP/1.1 200 OK\r\nX-Big: ");
    memset(m + len, 'a', big);
    len += big;
    memcpy(m + len, "\r\n\r\n", 5);
    expect_error(m, 0, "header line too long");
    free(m);

    /* many short lines: the section cap */
    {
        size_t n = H1_HEADERS_MAX / 20 + 16;
        char *s = malloc(n * 24 + 64);

        assert_non_null(s);
        len = (size_t)sprintf(s, "HTTP/1.1 200 OK\r\n");
        for (size_t i = 0; i < n; i++)
            len += (size_t)sprintf(s + len, "X-H%06zu: 0123456\r\n", i);
        sprintf(s + len, "\r\n");
        run(s, strlen(s), &(size_t){strlen(s)}, 1, 0, &o);
        assert_true(o.error);
        assert_non_null(strstr(o.err, "too large"));
        free(s);
    }

    /* bytes after a complete response are left to the caller */
    h1_init(&p);
    {
        const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA";
        struct h1_event ev;
        size_t at = 0;
        int done = 0;

        for (int i = 0; i < 8 && !done; i++) {
            at += h1_feed(&p, r + at, strlen(r) - at, &ev);
            done = ev.kind == H1_DONE;
        }
        assert_true(done);
        assert_int_equal(strlen(r) - at, 5);
    }
    h1_reset(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_close_delimited),
        cmocka_unit_test(test_interim_and_no_body),
        cmocka_unit_test(test_connection_and_retry_after),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_stray_empty_line_split_across_reads),
        cmocka_unit_test(test_limits),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
