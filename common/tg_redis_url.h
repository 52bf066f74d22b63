/* tg_redis_url: the Redis URL both services' configurations take (spend-svc's redis.url,
 * router-svc's tollgate.redis.url): redis[s]://[[USER][:PASSWORD]@]HOST[:PORT][/DB].
 * rediss:// is TLS; USER and PASSWORD are percent-encoded (%40 for @ ...). The parser is pure (no
 * I/O); tg_redis_url_read reads it from a configuration (tg_yaml).
 *
 * Threads: any (no state). */
#ifndef TG_REDIS_URL_H
#define TG_REDIS_URL_H

#include <stddef.h>

#include "tg_yaml.h"

#define TG_REDIS_URL_CAP 512      /* the whole URL, bytes incl. NUL */
#define TG_REDIS_URL_HOST_CAP 256 /* bytes incl. NUL */
#define TG_REDIS_URL_USER_CAP 128
#define TG_REDIS_URL_PASS_CAP 256
#define TG_REDIS_DEFAULT_PORT 6379
#define TG_REDIS_DB_MAX 15

struct tg_redis_url {
    char host[TG_REDIS_URL_HOST_CAP];
    int port;                           /* TG_REDIS_DEFAULT_PORT when absent */
    int db;                             /* 0 when absent */
    int tls;                            /* 1 for rediss:// */
    char username[TG_REDIS_URL_USER_CAP]; /* decoded; "" when absent */
    char password[TG_REDIS_URL_PASS_CAP]; /* decoded; "" when absent; a secret, never logged */
};

/* tg_redis_url_parse: url into *out (every field set). Returns 0, or -1 with the problem in err
 * ("expected redis://HOST:PORT/DB or rediss://...", "bad port", ...); err never quotes the
 * credentials. */
int tg_redis_url_parse(const char *url, struct tg_redis_url *out, char *err, size_t errlen);

/* tg_redis_url_read: the URL at node v (a config's key path, for the diagnostic) into *out.
 * Returns 0, or TG_ECONFIG after reporting "FILE:LINE: path: problem" through y. The URL's text
 * is wiped from the stack before returning (it may hold a password). */
int tg_redis_url_read(struct tg_yaml *y, const yaml_node_t *v, const char *path,
                      struct tg_redis_url *out);

#endif
