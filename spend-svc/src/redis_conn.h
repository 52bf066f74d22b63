/* redis_conn: one synchronous connection to Redis, over TCP or TLS, for redis_sink's thread.
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
 * has timeout_ms for its whole exchange, and its reply at most SP_REDIS_REPLY_MAX bytes.
 *
 * Errors: a connection that failed once is broken for good (every later command returns NULL);
 * the caller closes it and opens a new one. The reason of the last failure, never holding the
 * password, is in sp_redis_conn_open's err or sp_redis_conn_error.
 *
 * Threads: a connection belongs to one thread. */
#ifndef SP_REDIS_CONN_H
#define SP_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define SP_REDIS_REPLY_MAX (1u << 20) /* bytes read for one reply before the connection is cut */
#define SP_REDIS_ERR_CAP 192          /* a failure's reason, bytes incl. NUL */

struct sp_redis_conn_opts {
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

struct sp_redis_conn;

/* sp_redis_conn_open: connect, authenticate, select. Returns new (sp_redis_conn_close) or NULL
 * with the reason in err ("connect 127.0.0.1:6380: Connection refused", "TLS: certificate
 * verify failed: self-signed certificate", "AUTH refused: WRONGPASS ..."). */
struct sp_redis_conn *sp_redis_conn_open(const struct sp_redis_conn_opts *o, char *err,
                                         size_t errlen);

void sp_redis_conn_close(struct sp_redis_conn **c);

/* sp_redis_conn_argv / sp_redis_conn_cmd: send one command, wait for its reply. Returns the reply
 * (freeReplyObject; an error reply is a reply, type REDIS_REPLY_ERROR) or NULL when the exchange
 * failed (timeout, connection lost, protocol error, reply over SP_REDIS_REPLY_MAX): the
 * connection is then broken. sp_redis_conn_cmd takes hiredis's format (%s, %d, %b ...). */
redisReply *sp_redis_conn_argv(struct sp_redis_conn *c, int argc, const char **argv,
                               const size_t *argvlen);
redisReply *sp_redis_conn_cmd(struct sp_redis_conn *c, const char *fmt, ...);

/* sp_redis_conn_error: the reason the connection broke ("" while it works). */
const char *sp_redis_conn_error(const struct sp_redis_conn *c);

#endif
