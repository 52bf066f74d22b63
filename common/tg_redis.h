/* tg_redis: one synchronous connection to Redis, over TCP or TLS, for a service's own Redis
 * thread (spend-svc's redis_sink, router-svc's limit sync).
 *
 * Debian 12's hiredis (0.14) has no TLS. This module owns the socket (and, for rediss://, an
 * OpenSSL session) and uses hiredis only for what it does well: the command formatter
 * (redisFormatCommandArgv) and the reply parser (redisReader). So one code path serves
 * redis:// and rediss://, with managed services (ACL users, TLS-only endpoints, private CAs).
 *
 * Open: name resolution, connect within timeout_ms, TLS handshake (server certificate verified
 * against ca_file or the system store, which honours SSL_CERT_FILE; host name or IP address
 * checked against server_name, default the host; SNI sent for names; an optional client
 * certificate), AUTH (ACL user and password, or password only), SELECT db. Each command then
 * has timeout_ms for its whole exchange, and its reply at most TG_REDIS_REPLY_MAX bytes.
 *
 * Errors: a connection that failed once is broken for good (every later command returns NULL);
 * the caller closes it and opens a new one. The reason of the last failure, never holding the
 * password, is in tg_redis_conn_open's err or tg_redis_conn_error.
 *
 * Threads: a connection belongs to one thread. */
#ifndef TG_REDIS_H
#define TG_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define TG_REDIS_REPLY_MAX (1u << 20) /* bytes read for one reply before the connection is cut */
#define TG_REDIS_ERR_CAP 192          /* a failure's reason, bytes incl. NUL */
#define TG_REDIS_PIPELINE_MAX (256u * 1024u) /* bytes of commands queued before a send */
/* elements all the arrays of one reply may announce: each takes at least 3 bytes ("+\r\n"), so
 * a reply within TG_REDIS_REPLY_MAX bytes never announces more */
#define TG_REDIS_ELEMENTS_MAX (TG_REDIS_REPLY_MAX / 3u)

struct tg_redis_conn_opts {
    const char *host;        /* name or address */
    int port;
    int db;                  /* SELECT when not 0 */
    const char *username;    /* ACL user; NULL or "" = password only (AUTH password) */
    const char *password;    /* NULL or "" = no AUTH */
    int tls;                 /* 1 for rediss:// */
    const char *ca_file;     /* PEM bundle; NULL or "" = the system store */
    const char *cert_file;   /* client certificate (PEM), with key_file; NULL or "" = none */
    const char *key_file;
    const char *server_name; /* name (or address) the certificate must carry; NULL or "" = host */
    uint32_t timeout_ms;     /* connect, and each command's exchange */
};

struct tg_redis_conn;

/* tg_redis_conn_open: connect, authenticate, select. Returns new (tg_redis_conn_close) or NULL
 * with the reason in err ("connect 127.0.0.1:6380: Connection refused", "TLS: certificate
 * verify failed: self-signed certificate", "AUTH refused: WRONGPASS ..."). */
struct tg_redis_conn *tg_redis_conn_open(const struct tg_redis_conn_opts *o, char *err,
                                         size_t errlen);

void tg_redis_conn_close(struct tg_redis_conn **c);

/* tg_redis_conn_argv / tg_redis_conn_cmd: send one command, wait for its reply. Returns the reply
 * (freeReplyObject; an error reply is a reply, type REDIS_REPLY_ERROR) or NULL when the exchange
 * failed (timeout, connection lost, protocol error, reply over TG_REDIS_REPLY_MAX): the
 * connection is then broken. tg_redis_conn_cmd takes hiredis's format (%s, %d, %b ...). */
redisReply *tg_redis_conn_argv(struct tg_redis_conn *c, int argc, const char **argv,
                               const size_t *argvlen);
redisReply *tg_redis_conn_cmd(struct tg_redis_conn *c, const char *fmt, ...);

/* tg_redis_conn_append: format one command into the connection's pipeline buffer (sent by the
 * next tg_redis_conn_reply). Returns 0, or -1 when the command cannot be formatted or the buffer
 * would pass TG_REDIS_PIPELINE_MAX bytes (the connection is not broken: send what is queued and
 * read its replies first). tg_redis_conn_reply: send what is queued, then read the next reply
 * in order (at most TG_REDIS_REPLY_MAX bytes, timeout_ms for the exchange); NULL when it failed
 * (the connection is then broken), else a new reply (freeReplyObject). The caller reads exactly
 * one reply per appended command. */
int tg_redis_conn_append(struct tg_redis_conn *c, int argc, const char **argv,
                         const size_t *argvlen);
redisReply *tg_redis_conn_reply(struct tg_redis_conn *c);

/* tg_redis_reader_create: hiredis's reply reader with a bound on what array headers announce.
 * Debian's hiredis (0.14) allocates an array's element table when it reads the header ("*N"),
 * before any element arrives, so a reply announcing a billion elements would take gigabytes
 * whatever the byte cap. This reader refuses (a protocol error, reader->err REDIS_ERR_OOM) an
 * array header that would bring the elements announced since *announced was last zeroed past
 * TG_REDIS_ELEMENTS_MAX; the caller zeroes it (borrowed: it outlives the reader) before each
 * reply. Returns new (redisReaderFree) or NULL. Any thread. */
redisReader *tg_redis_reader_create(size_t *announced);

/* tg_redis_conn_error: the reason the connection broke ("" while it works). */
const char *tg_redis_conn_error(const struct tg_redis_conn *c);

#endif
