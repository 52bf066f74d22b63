/* h1tls: TLS for the built-in HTTP/1.1 client (h1client.c): OpenSSL on the loop, non-blocking,
 * over the client's own sockets. One SSL_CTX per way of verifying (the system's CA store or
 * SSL_CERT_FILE, a deployment's own bundle, none at all), shared by every loop of the process;
 * the last session each origin was given is offered again on its next new connection
 * (resumption); ALPN offers http/1.1 only. Loop threads, except h1t_ctx (any submitter) and
 * h1t_global_fini (main thread, at the end). */
#include <errno.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tg_log.h"
#include "upstream_int.h"

/* Ways of verifying a process uses at once: deployments with a CA bundle of their own, the
 * default store, none. Past it, transfers go through libcurl. */
#define H1T_CTX_MAX 16

struct h1t_ctx_entry {
    int no_verify;
    char ca_file[4096]; /* "" = the default store */
    SSL_CTX *ctx;
};

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
/* the two without a bundle of their own (verified with the default store; not verified), once
 * made: every request looks its context up, most of them for one of these */
static _Atomic(SSL_CTX *) ctx_default, ctx_no_verify;
static struct h1t_ctx_entry ctxs[H1T_CTX_MAX];
static int n_ctxs;
static int ctx_full_warned;

/* A new session from the server (TLS 1.3: after the handshake, in a later read): kept on the
 * connection's origin for its next new connection, replacing the one before. */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct h1origin *o = SSL_get_app_data(ssl);

    if (o == NULL)
        return 0;
    if (o->sess != NULL)
        SSL_SESSION_free(o->sess);
    o->sess = sess;
    return 1; /* the reference is ours */
}

static SSL_CTX *ctx_make(int no_verify, const char *ca)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    const char *cf, *cp;

    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1); /* a response in one read, not a header and a body */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, new_session);
    if (SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x08http/1.1", 9) != 0)
        goto fail;
    if (no_verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return ctx;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (ca[0] != '\0') {
        /* ssl_verify: PATH trusts that bundle alone, as Python's requests does */
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
            goto fail;
        return ctx;
    }
    /* the same store libcurl verifies with (upstream.c): the directory's certificates are
     * read when a chain needs them, not all at start */
    up_ca_store(&cf, &cp);
    if (cf == NULL && cp == NULL) {
        if (SSL_CTX_set_default_verify_paths(ctx) != 1)
            goto fail;
    } else if (SSL_CTX_load_verify_locations(ctx, cf, cp) != 1) {
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}

SSL_CTX *h1t_ctx(int no_verify, const char *ca_file, int *full)
{
    const char *ca = no_verify || ca_file == NULL ? "" : ca_file;
    _Atomic(SSL_CTX *) *quick = no_verify ? &ctx_no_verify : ca[0] == '\0' ? &ctx_default : NULL;
    SSL_CTX *ctx = quick != NULL ? atomic_load_explicit(quick, memory_order_acquire) : NULL;

    *full = 0;
    if (ctx != NULL)
        return ctx;
    if (strlen(ca) >= sizeof(ctxs[0].ca_file))
        return NULL;
    pthread_mutex_lock(&ctx_mu);
    for (int i = 0; i < n_ctxs; i++) {
        if (ctxs[i].no_verify == !!no_verify && strcmp(ctxs[i].ca_file, ca) == 0) {
            ctx = ctxs[i].ctx;
            goto out;
        }
    }
    if (n_ctxs == H1T_CTX_MAX) {
        if (!ctx_full_warned)
            TG_WARN("upstream: more than %d ways of verifying providers' certificates; the "
                    "others go through libcurl",
                    H1T_CTX_MAX);
        ctx_full_warned = 1;
        *full = 1;
        goto out;
    }
    /* NULL too is kept: a bundle that cannot be loaded is not tried again on every request
     * (libcurl says why, with the same bundle) */
    ctx = ctx_make(no_verify, ca);
    ctxs[n_ctxs].no_verify = !!no_verify;
    memcpy(ctxs[n_ctxs].ca_file, ca, strlen(ca) + 1);
    ctxs[n_ctxs].ctx = ctx;
    n_ctxs++;
    if (quick != NULL && ctx != NULL)
        atomic_store_explicit(quick, ctx, memory_order_release);
out:
    pthread_mutex_unlock(&ctx_mu);
    return ctx;
}

void h1t_global_fini(void)
{
    pthread_mutex_lock(&ctx_mu);
    atomic_store(&ctx_default, NULL);
    atomic_store(&ctx_no_verify, NULL);
    for (int i = 0; i < n_ctxs; i++)
        SSL_CTX_free(ctxs[i].ctx);
    n_ctxs = 0;
    pthread_mutex_unlock(&ctx_mu);
}

static int is_ip(const char *host)
{
    unsigned char a[16];

    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

int h1t_conn_setup(struct h1conn *c, struct h1origin *o, char *errbuf, size_t cap)
{
    SSL *ssl = SSL_new(o->ctx);

    if (ssl == NULL) {
        snprintf(errbuf, cap, "out of memory");
        return -1;
    }
    if (SSL_set_fd(ssl, c->fd) != 1)
        goto fail;
    SSL_set_app_data(ssl, o);
    if (!is_ip(o->host) && SSL_set_tlsext_host_name(ssl, o->host) != 1)
        goto fail; /* SNI: names only (RFC 6066) */
    if (SSL_CTX_get_verify_mode(o->ctx) & SSL_VERIFY_PEER) {
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (is_ip(o->host) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), o->host) != 1
                           : SSL_set1_host(ssl, o->host) != 1)
            goto fail;
    }
    if (o->sess != NULL && SSL_SESSION_is_resumable(o->sess)) {
        /* a copy for each connection: OpenSSL's client uses a TLS 1.3 session once (marked not
         * resumable when a resumption with it completes), so connections opened together on one
         * shared object resumed only until the first of them finished its handshake, and the
         * rest (64 of 64 in a pool reopened at once) made full handshakes. The ticket is offered
         * again by each; the server decides, as with nginx's upstream sessions. */
        SSL_SESSION *copy = SSL_SESSION_dup(o->sess);

        if (copy != NULL) {
            SSL_set_session(ssl, copy);
            SSL_SESSION_free(copy); /* the connection holds its own reference */
        }
    }
    SSL_set_connect_state(ssl);
    c->ssl = ssl;
    return 0;
fail:
    SSL_free(ssl);
    ERR_clear_error();
    snprintf(errbuf, cap, "cannot set up TLS for %.64s", o->hostport);
    return -1;
}

void h1t_conn_free(struct h1conn *c)
{
    if (c->ssl != NULL) {
        /* close_notify (one write, not waited for): a session freed without it is marked
         * not resumable, and the origin's next connection would make a full handshake */
        if (c->tls_ready) {
            ERR_clear_error();
            SSL_shutdown(c->ssl);
            ERR_clear_error();
        }
        SSL_set_app_data(c->ssl, NULL);
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
}

/* Why an SSL call failed (e: SSL_get_error), in libcurl's words where it has some, so that a
 * client sees the same reason whichever client carried the transfer. */
static void tls_why(struct h1conn *c, const struct h1origin *o, int e, const char *what, char *why,
                    size_t cap)
{
    long vr = SSL_get_verify_result(c->ssl);
    unsigned long le = ERR_peek_last_error();

    if (!c->tls_ready && vr != X509_V_OK) {
        if (vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH)
            snprintf(why, cap,
                     "SSL: no alternative certificate subject name matches target host name "
                     "'%.200s'",
                     o->host);
        else
            snprintf(why, cap, "SSL certificate problem: %s", X509_verify_cert_error_string(vr));
    } else if (e == SSL_ERROR_SYSCALL && le == 0) {
        snprintf(why, cap, "%s with %.64s failed: %s", what, o->hostport,
                 errno != 0 ? strerror(errno) : "connection closed");
    } else {
        char eb[160];

        ERR_error_string_n(le, eb, sizeof(eb));
        snprintf(why, cap, "%s with %.64s failed: %s", what, o->hostport, eb);
    }
    ERR_clear_error();
}

int h1t_handshake(struct rt_upstream *up, struct h1conn *c, char *why, size_t cap)
{
    int r, e;

    ERR_clear_error();
    errno = 0;
    r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        c->tls_ready = 1;
        atomic_fetch_add(&up->st_tls_handshakes, 1);
        if (SSL_session_reused(c->ssl))
            atomic_fetch_add(&up->st_tls_resumed, 1);
        return 1;
    }
    e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        c->readable = 0;
        return 0;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        c->writable = 0;
        return 0;
    }
    tls_why(c, &up->origins[c->origin], e, "TLS handshake", why, cap);
    return -1;
}

ssize_t h1t_write(struct rt_upstream *up, struct h1conn *c, const char *p, size_t n, char *why,
                  size_t cap)
{
    int r, e;

    ERR_clear_error();
    errno = 0;
    r = SSL_write(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (r > 0)
        return r;
    e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_WRITE) {
        c->writable = 0;
        return 0;
    }
    if (e == SSL_ERROR_WANT_READ) { /* the session wants a read first (TLS 1.2 renegotiation) */
        c->writable = 0;
        c->tls_write_wants_read = 1;
        return 0;
    }
    tls_why(c, &up->origins[c->origin], e, "sending the request", why, cap);
    return -1;
}

ssize_t h1t_read(struct rt_upstream *up, struct h1conn *c, char *p, size_t n, char *why,
                 size_t cap)
{
    int r, e;

    ERR_clear_error();
    errno = 0;
    r = SSL_read(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (r > 0)
        return r;
    e = SSL_get_error(c->ssl, r);
    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0; /* close_notify */
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_last_error() == 0 && errno == 0)
            return 0; /* closed without close_notify: the HTTP framing decides */
        break;
    case SSL_ERROR_SSL:
        if (ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
            ERR_clear_error();
            return 0; /* the same, as OpenSSL 3 reports it */
        }
        break;
    default:
        break;
    }
    tls_why(c, &up->origins[c->origin], e, "receiving the response", why, cap);
    errno = EPROTO;
    return -2;
}

int h1t_idle_ok(struct rt_upstream *up, struct h1conn *c)
{
    char b[256];
    char why[8];

    /* session tickets and other records without application data keep the connection */
    return h1t_read(up, c, b, sizeof(b), why, sizeof(why)) == -1 && errno == EAGAIN;
}

int h1t_pending(const struct h1conn *c)
{
    return c->ssl != NULL && SSL_pending(c->ssl) > 0;
}
