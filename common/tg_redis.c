/* tg_redis: see tg_redis.h. */
#include "tg_redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tg_time.h"

#define READ_CHUNK 16384

struct tg_redis_conn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    redisReader *reader;
    uint32_t timeout_ms;
    int broken;
    char err[TG_REDIS_ERR_CAP];
    char *pipe;       /* commands queued by tg_redis_conn_append (TG_REDIS_PIPELINE_MAX) */
    size_t pipe_len;  /* bytes queued */
    size_t announced; /* array elements announced by the reply being read */
};

/* The reader's functions: hiredis's own, with createArray bounded (tg_redis_reader_create). */
static redisReplyObjectFunctions bounded_fns;
static void *(*hiredis_create_array)(const redisReadTask *, int);
static pthread_once_t fns_once = PTHREAD_ONCE_INIT;

static void *bounded_create_array(const redisReadTask *task, int elements)
{
    size_t *announced = task->privdata;

    if (elements < 0 || (size_t)elements > TG_REDIS_ELEMENTS_MAX)
        return NULL;
    if (announced != NULL) {
        if ((size_t)elements > TG_REDIS_ELEMENTS_MAX - *announced)
            return NULL;
        *announced += (size_t)elements;
    }
    return hiredis_create_array(task, elements);
}

static void fns_init(void)
{
    redisReader *r = redisReaderCreate();

    if (r == NULL)
        return;
    bounded_fns = *r->fn;
    redisReaderFree(r);
    hiredis_create_array = bounded_fns.createArray;
    bounded_fns.createArray = bounded_create_array;
}

redisReader *tg_redis_reader_create(size_t *announced)
{
    redisReader *r;

    pthread_once(&fns_once, fns_init);
    if (hiredis_create_array == NULL)
        return NULL;
    r = redisReaderCreateWithFunctions(&bounded_fns);
    if (r != NULL)
        r->privdata = announced;
    return r;
}

static void set_err(struct tg_redis_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_err(struct tg_redis_conn *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    c->broken = 1;
}

/* reader_error: the reason of a reader's failure into c->err. */
static void reader_error(struct tg_redis_conn *c)
{
    if (c->reader->err == REDIS_ERR_OOM)
        set_err(c, "protocol error: a reply announces over %u elements (or memory ran out)",
                TG_REDIS_ELEMENTS_MAX);
    else
        set_err(c, "protocol error: %s", c->reader->errstr);
}

/* tls_reason: the first queued OpenSSL error, or the verification result. */
static void tls_reason(struct tg_redis_conn *c, const char *what)
{
    long v = c->ssl != NULL ? SSL_get_verify_result(c->ssl) : X509_V_OK;
    unsigned long e = ERR_peek_last_error();
    char buf[160];

    if (v != X509_V_OK) {
        set_err(c, "TLS: certificate verify failed: %s", X509_verify_cert_error_string(v));
    } else if (e != 0) {
        ERR_error_string_n(e, buf, sizeof(buf));
        set_err(c, "TLS: %s: %s", what, buf);
    } else {
        set_err(c, "TLS: %s: %s", what,
                errno == EAGAIN || errno == EWOULDBLOCK ? "timed out"
                : errno != 0                            ? strerror(errno)
                                                        : "connection closed");
    }
    ERR_clear_error();
}

static void set_timeouts(int fd, uint32_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* dial: a blocking TCP socket connected to host:port within timeout_ms, or -1 (err set). */
static int dial(struct tg_redis_conn *c, const char *host, int port, uint32_t timeout_ms)
{
    struct addrinfo hints, *res = NULL, *ai;
    char service[16];
    int fd = -1, rc, one = 1;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof(service), "%d", port);
    rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        set_err(c, "resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        struct pollfd p;
        int soerr = 0;
        socklen_t len = sizeof(soerr);

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            set_err(c, "socket: %s", strerror(errno));
            continue;
        }
        rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            p.fd = fd;
            p.events = POLLOUT;
            p.revents = 0;
            rc = poll(&p, 1, (int)timeout_ms);
            if (rc == 0) {
                errno = ETIMEDOUT;
                rc = -1;
            } else if (rc > 0) {
                rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0 ? 0
                                                                                          : -1;
                if (soerr != 0)
                    errno = soerr;
            }
        }
        if (rc == 0)
            break;
        set_err(c, "connect %s:%d: %s", host, port, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        set_err(c, "fcntl: %s", strerror(errno));
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    set_timeouts(fd, timeout_ms);
    c->err[0] = '\0';
    c->broken = 0;
    return fd;
}

static int is_address(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

static int nonempty(const char *s)
{
    return s != NULL && s[0] != '\0';
}

static int tls_start(struct tg_redis_conn *c, const struct tg_redis_conn_opts *o)
{
    const char *name = nonempty(o->server_name) ? o->server_name : o->host;
    int ok;

    ERR_clear_error();
    c->ctx = SSL_CTX_new(TLS_client_method());
    if (c->ctx == NULL) {
        tls_reason(c, "context");
        return -1;
    }
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
    ok = nonempty(o->ca_file) ? SSL_CTX_load_verify_locations(c->ctx, o->ca_file, NULL)
                              : SSL_CTX_set_default_verify_paths(c->ctx);
    if (ok != 1) {
        set_err(c, "TLS: cannot load the CA bundle %s", nonempty(o->ca_file) ? o->ca_file : "");
        return -1;
    }
    if (nonempty(o->cert_file) &&
        (SSL_CTX_use_certificate_chain_file(c->ctx, o->cert_file) != 1 ||
         SSL_CTX_use_PrivateKey_file(c->ctx, o->key_file, SSL_FILETYPE_PEM) != 1 ||
         SSL_CTX_check_private_key(c->ctx) != 1)) {
        set_err(c, "TLS: cannot use the client certificate %s with key %s", o->cert_file,
                nonempty(o->key_file) ? o->key_file : "(none)");
        return -1;
    }
    c->ssl = SSL_new(c->ctx);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1) {
        tls_reason(c, "session");
        return -1;
    }
    if (is_address(name)) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name);
    } else {
        ok = SSL_set_tlsext_host_name(c->ssl, name) == 1 && SSL_set1_host(c->ssl, name) == 1;
    }
    if (ok != 1) {
        set_err(c, "TLS: bad server name %s", name);
        return -1;
    }
    errno = 0;
    if (SSL_connect(c->ssl) != 1) {
        tls_reason(c, "handshake");
        return -1;
    }
    return 0;
}

void tg_redis_conn_close(struct tg_redis_conn **pc)
{
    struct tg_redis_conn *c = pc != NULL ? *pc : NULL;

    if (c == NULL)
        return;
    if (c->ssl != NULL) {
        if (!c->broken)
            SSL_shutdown(c->ssl); /* close_notify; no wait for the peer's */
        SSL_free(c->ssl);
    }
    SSL_CTX_free(c->ctx);
    if (c->fd >= 0)
        close(c->fd);
    if (c->reader != NULL)
        redisReaderFree(c->reader);
    free(c->pipe);
    free(c);
    *pc = NULL;
}

static int write_all(struct tg_redis_conn *c, const char *buf, size_t len, uint64_t deadline)
{
    while (len > 0) {
        ssize_t n;

        if (tg_now_mono_ms() > deadline) {
            set_err(c, "write: timed out");
            return -1;
        }
        if (c->ssl != NULL) {
            errno = 0;
            n = SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
            if (n <= 0) {
                tls_reason(c, "write");
                return -1;
            }
        } else {
            n = send(c->fd, buf, len, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                set_err(c, "write: %s", n < 0 ? strerror(errno) : "connection closed");
                return -1;
            }
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* read_reply: the next reply, reading at most TG_REDIS_REPLY_MAX bytes for it. */
static redisReply *read_reply(struct tg_redis_conn *c, uint64_t deadline)
{
    char buf[READ_CHUNK];
    size_t taken = 0;
    void *reply = NULL;

    c->announced = 0;
    for (;;) {
        ssize_t n;

        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
            reader_error(c);
            return NULL;
        }
        if (reply != NULL)
            return reply;
        if (taken >= TG_REDIS_REPLY_MAX) {
            set_err(c, "reply over %u bytes", TG_REDIS_REPLY_MAX);
            return NULL;
        }
        if (tg_now_mono_ms() > deadline) {
            set_err(c, "read: timed out");
            return NULL;
        }
        if (c->ssl != NULL) {
            errno = 0;
            n = SSL_read(c->ssl, buf, sizeof(buf));
            if (n <= 0) {
                tls_reason(c, "read");
                return NULL;
            }
        } else {
            n = recv(c->fd, buf, sizeof(buf), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                set_err(c, "read: %s",
                        n < 0 ? (errno == EAGAIN ? "timed out" : strerror(errno))
                              : "connection closed");
                return NULL;
            }
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
            reader_error(c);
            return NULL;
        }
        taken += (size_t)n;
    }
}

/* exchange: send cmd (formatted, len bytes), read its reply. */
static redisReply *exchange(struct tg_redis_conn *c, const char *cmd, int len)
{
    uint64_t deadline = tg_now_mono_ms() + c->timeout_ms;

    if (c->broken)
        return NULL;
    if (len < 0) {
        set_err(c, "cannot format the command");
        return NULL;
    }
    if (write_all(c, cmd, (size_t)len, deadline) != 0)
        return NULL;
    return read_reply(c, deadline);
}

redisReply *tg_redis_conn_argv(struct tg_redis_conn *c, int argc, const char **argv,
                               const size_t *argvlen)
{
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    redisReply *r = exchange(c, cmd, len);

    if (cmd != NULL)
        redisFreeCommand(cmd);
    return r;
}

redisReply *tg_redis_conn_cmd(struct tg_redis_conn *c, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    int len;
    redisReply *r;

    va_start(ap, fmt);
    len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    r = exchange(c, cmd, len);
    if (cmd != NULL)
        redisFreeCommand(cmd);
    return r;
}

int tg_redis_conn_append(struct tg_redis_conn *c, int argc, const char **argv,
                         const size_t *argvlen)
{
    char *cmd = NULL;
    int len;

    if (c->broken)
        return -1;
    if (c->pipe == NULL) {
        c->pipe = malloc(TG_REDIS_PIPELINE_MAX);
        if (c->pipe == NULL)
            return -1;
    }
    len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0 || (size_t)len > TG_REDIS_PIPELINE_MAX - c->pipe_len) {
        if (cmd != NULL)
            redisFreeCommand(cmd);
        return -1;
    }
    memcpy(c->pipe + c->pipe_len, cmd, (size_t)len);
    c->pipe_len += (size_t)len;
    redisFreeCommand(cmd);
    return 0;
}

redisReply *tg_redis_conn_reply(struct tg_redis_conn *c)
{
    uint64_t deadline = tg_now_mono_ms() + c->timeout_ms;

    if (c->broken)
        return NULL;
    if (c->pipe_len > 0) {
        size_t n = c->pipe_len;

        c->pipe_len = 0;
        if (write_all(c, c->pipe, n, deadline) != 0)
            return NULL;
    }
    return read_reply(c, deadline);
}

const char *tg_redis_conn_error(const struct tg_redis_conn *c)
{
    return c->err;
}

/* setup: AUTH and SELECT; 0, or -1 with the reason in c->err. */
static int setup(struct tg_redis_conn *c, const struct tg_redis_conn_opts *o)
{
    redisReply *r;

    if (nonempty(o->password)) {
        const char *argv[3] = {"AUTH", o->username, o->password};
        size_t lens[3] = {4, nonempty(o->username) ? strlen(o->username) : 0,
                          strlen(o->password)};

        if (nonempty(o->username)) {
            r = tg_redis_conn_argv(c, 3, argv, lens);
        } else {
            argv[1] = o->password;
            lens[1] = lens[2];
            r = tg_redis_conn_argv(c, 2, argv, lens);
        }
        if (r == NULL)
            return -1;
        if (r->type == REDIS_REPLY_ERROR) {
            /* Redis's own words (WRONGPASS ..., NOAUTH ...): they never carry the password */
            set_err(c, "AUTH refused: %.120s", r->str);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    if (o->db != 0) {
        r = tg_redis_conn_cmd(c, "SELECT %d", o->db);
        if (r == NULL)
            return -1;
        if (r->type == REDIS_REPLY_ERROR) {
            set_err(c, "SELECT %d refused: %.120s", o->db, r->str);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

struct tg_redis_conn *tg_redis_conn_open(const struct tg_redis_conn_opts *o, char *err,
                                         size_t errlen)
{
    struct tg_redis_conn *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->fd = -1;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 1000;
    c->reader = tg_redis_reader_create(&c->announced);
    if (c->reader == NULL) {
        set_err(c, "out of memory");
        goto fail;
    }
    c->fd = dial(c, o->host, o->port, c->timeout_ms);
    if (c->fd < 0)
        goto fail;
    if (o->tls && tls_start(c, o) != 0)
        goto fail;
    if (setup(c, o) != 0)
        goto fail;
    return c;
fail:
    snprintf(err, errlen, "%s", c->err[0] != '\0' ? c->err : "connection failed");
    c->broken = 1;
    tg_redis_conn_close(&c);
    return NULL;
}
