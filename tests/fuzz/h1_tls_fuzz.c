/* libFuzzer target for h1tls (router-svc/src/h1tls.c): the built-in client's TLS layer, over a
 * socketpair, against a server of this target's own (OpenSSL, a P-256 certificate made once).
 *
 * The first input byte chooses the mode and the server's write size; the rest is what the
 * provider sends:
 *  - mode 0..2 (a provider that speaks TLS): the handshake completes; the rest is sent as
 *    application data in records of 1..64 bytes (or one 16 KiB record at most), read by the
 *    client with h1t_read and parsed as responses (h1.h, h1_reset between them, as on a
 *    kept-alive connection); then mode 0 ends with close_notify, mode 1 with a bare close
 *    (no close_notify), mode 2 sends a session ticket and checks that an idle connection keeps
 *    it (h1t_idle_ok) before closing with close_notify;
 *  - mode 3 (a provider that does not speak TLS, or garbage): the rest is written raw to the
 *    client during its handshake, then the server's side is closed.
 *
 * Properties (abort on violation):
 *  - a TLS provider: the handshake completes; the client reads exactly the bytes sent, in order,
 *    never more than asked; the end reads as 0 with or without close_notify; no read fails;
 *    h1t_pending is false once everything is read; a session ticket alone keeps an idle
 *    connection;
 *  - garbage: the handshake fails (never completes) within a bounded number of steps, with a
 *    non-empty reason. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h1.h"
#include "upstream_int.h"

#define FUZZ_STEPS_MAX 64  /* handshake steps of both sides before giving up */
#define FUZZ_INPUT_MAX 65536

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static SSL_CTX *srv_ctx;
static SSL_CTX *cli_ctx;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "h1_tls_fuzz: %s\n", what);
        abort();
    }
}

/* The server's key and certificate, once per process. */
static void setup(void)
{
    EVP_PKEY *k;
    X509 *x;
    X509_NAME *n;
    int full;

    if (srv_ctx != NULL)
        return;
    signal(SIGPIPE, SIG_IGN); /* as router-svc: a write to a closed peer is an error only */
    k = EVP_EC_gen("P-256");
    x = X509_new();
    check(k != NULL && x != NULL, "key or certificate");
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1, -1,
                               0);
    X509_set_issuer_name(x, n);
    check(X509_sign(x, k, EVP_sha256()) > 0, "self-signing");
    srv_ctx = SSL_CTX_new(TLS_server_method());
    check(srv_ctx != NULL && SSL_CTX_use_certificate(srv_ctx, x) == 1 &&
              SSL_CTX_use_PrivateKey(srv_ctx, k) == 1,
          "server context");
    X509_free(x);
    EVP_PKEY_free(k);
    cli_ctx = h1t_ctx(1, NULL, &full); /* the client's own: no verification (a test server) */
    check(cli_ctx != NULL, "client context");
}

/* Responses parsed from what the client read (the upstream client's way of feeding). */
static void parse(struct h1_parser *rp, const char *p, size_t n)
{
    while (n > 0) {
        struct h1_event ev;
        size_t used = h1_feed(rp, p, n, &ev);

        check(used <= n, "h1_feed used more than given");
        p += used;
        n -= used;
        if (ev.kind == H1_NEED_MORE)
            return;
        if (ev.kind == H1_DONE)
            h1_reset(rp);
        else if (ev.kind == H1_ERROR)
            return; /* the connection would be closed: the rest is not parsed */
    }
}

/* Everything the client can read now: appended to got (at most cap), parsed. Returns 1 at the
 * end of the stream, 0 when it waits. */
static int client_drain(struct rt_upstream *up, struct h1conn *c, struct h1_parser *rp,
                        char *got, size_t *len, size_t cap)
{
    char buf[4096];
    char why[256];

    c->readable = 1;
    for (;;) {
        size_t want = sizeof(buf);
        ssize_t r = h1t_read(up, c, buf, want, why, sizeof(why));

        if (r > 0) {
            check((size_t)r <= want, "h1t_read returned more than asked");
            check(*len + (size_t)r <= cap, "the client read more than was sent");
            memcpy(got + *len, buf, (size_t)r);
            *len += (size_t)r;
            parse(rp, buf, (size_t)r);
            continue;
        }
        if (r == 0)
            return 1;
        check(r == -1 && errno == EAGAIN, "a read from a well-behaved TLS server failed");
        return 0;
    }
}

static void run_tls(struct rt_upstream *up, struct h1conn *c, SSL *srv, int fd_s, int mode,
                    size_t piece, const uint8_t *p, size_t n)
{
    struct h1_parser rp;
    char *got = malloc(n + 1);
    size_t len = 0, off = 0;
    int ended = 0;

    check(got != NULL, "out of memory");
    h1_init(&rp);
    while (off < n) {
        size_t w = n - off < piece ? n - off : piece;
        int r = SSL_write(srv, p + off, (int)w);

        if (r > 0)
            off += (size_t)r;
        else
            check(SSL_get_error(srv, r) == SSL_ERROR_WANT_WRITE, "server write");
        check(!client_drain(up, c, &rp, got, &len, n), "end of stream before the end");
    }
    check(len == n && (n == 0 || memcmp(got, p, n) == 0), "the client read other bytes");
    check(!h1t_pending(c), "decrypted bytes left unread");
    if (mode == 2) {
        /* a session ticket on an idle connection keeps it */
        check(SSL_new_session_ticket(srv) == 1 && SSL_do_handshake(srv) == 1, "ticket");
        check(h1t_idle_ok(up, c), "an idle connection dropped for a session ticket");
    }
    if (mode == 1) {
        shutdown(fd_s, SHUT_RDWR); /* no close_notify */
    } else {
        SSL_shutdown(srv);
        shutdown(fd_s, SHUT_WR);
    }
    for (int i = 0; i < FUZZ_STEPS_MAX && !ended; i++)
        ended = client_drain(up, c, &rp, got, &len, n);
    check(ended, "the end of the stream was not read as an end");
    check(len == n, "bytes after the end");
    h1_reset(&rp);
    free(got);
}

static void run_garbage(struct rt_upstream *up, struct h1conn *c, int fd_s, const uint8_t *p,
                        size_t n)
{
    char why[256] = "";
    int r = 0;

    if (n > 0 && write(fd_s, p, n) < 0)
        return; /* more than the socket holds: nothing to learn */
    shutdown(fd_s, SHUT_WR);
    for (int i = 0; i < FUZZ_STEPS_MAX; i++) {
        c->readable = c->writable = 1;
        r = h1t_handshake(up, c, why, sizeof(why));
        check(r != 1, "a handshake completed with garbage");
        if (r < 0)
            break;
    }
    check(r < 0 && why[0] != '\0', "a failed handshake without a reason (or one that never ends)");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rt_upstream up;
    struct h1origin o;
    struct h1conn c;
    char err[256];
    int sv[2];
    int mode;
    size_t piece;
    SSL *srv = NULL;

    if (size < 1 || size > FUZZ_INPUT_MAX)
        return 0;
    setup();
    mode = data[0] & 3;
    piece = (data[0] >> 2) == 63 ? 16384 : (size_t)(data[0] >> 2) + 1;
    check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0,
          "socketpair");
    memset(&up, 0, sizeof(up));
    memset(&o, 0, sizeof(o));
    memset(&c, 0, sizeof(c));
    snprintf(o.hostport, sizeof(o.hostport), "127.0.0.1:443");
    snprintf(o.host, sizeof(o.host), "127.0.0.1");
    o.tls = 1;
    o.ctx = cli_ctx;
    up.origins = &o;
    c.fd = sv[0];
    check(h1t_conn_setup(&c, &o, err, sizeof(err)) == 0, "client session");
    if (mode == 3) {
        run_garbage(&up, &c, sv[1], data + 1, size - 1);
    } else {
        int cdone = 0, sdone = 0;

        srv = SSL_new(srv_ctx);
        check(srv != NULL && SSL_set_fd(srv, sv[1]) == 1, "server session");
        SSL_set_accept_state(srv);
        for (int i = 0; i < FUZZ_STEPS_MAX && !(cdone && sdone); i++) {
            char why[256];
            int r;

            c.readable = c.writable = 1;
            if (!cdone) {
                r = h1t_handshake(&up, &c, why, sizeof(why));
                check(r >= 0, "the handshake with a TLS server failed");
                cdone = r == 1;
            }
            if (!sdone) {
                r = SSL_do_handshake(srv);
                sdone = r == 1;
                check(sdone || SSL_get_error(srv, r) == SSL_ERROR_WANT_READ ||
                          SSL_get_error(srv, r) == SSL_ERROR_WANT_WRITE,
                      "server handshake");
            }
        }
        check(cdone && sdone, "the handshake did not complete");
        run_tls(&up, &c, srv, sv[1], mode, piece, data + 1, size - 1);
        SSL_free(srv);
    }
    h1t_conn_free(&c);
    if (o.sess != NULL)
        SSL_SESSION_free(o.sess);
    close(sv[0]);
    close(sv[1]);
    ERR_clear_error();
    return 0;
}
