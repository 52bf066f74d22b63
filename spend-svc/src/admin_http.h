/* admin_http: spend-svc's HTTP endpoints (libmicrohttpd, internal thread pool).
 *
 *   GET /health/liveness   200 while the process serves HTTP
 *   GET /health/readiness  200 when Kafka and Postgres are up, else 503; Redis is reported
 *                          but never makes it fail. Body: {"ready":..,"kafka":"up|down",
 *                          "postgres":..,"redis":..,"control_topic":"caught_up|replaying"}
 *   GET /metrics           Prometheus text (the service's writer callback)
 *   GET /spend/logs?call_id=UUID                      master key; the spend_logs row
 *   GET /spend/report?group_by=key|team|model&from=YYYY-MM-DD&to=YYYY-MM-DD   master key
 * The /spend endpoints need `Authorization: Bearer <master_key>` (401 otherwise, also when no
 * master key is configured), answer 400 naming the bad parameter, 404 for an unknown call id
 * and 503 when Postgres does not answer within its deadline. They use a Postgres connection
 * of their own, one query at a time. */
#ifndef SP_ADMIN_HTTP_H
#define SP_ADMIN_HTTP_H

#include <stddef.h>

#include "tg_buf.h"

#define SP_ADMIN_REASON_CAP 256 /* a dependency's reason in readiness, bytes */

struct sp_admin_status {
    int kafka_up;
    char kafka_reason[SP_ADMIN_REASON_CAP]; /* why Kafka is down ("" = not known or up) */
    int postgres_up;
    int redis_up;
    char redis_reason[SP_ADMIN_REASON_CAP]; /* why Redis is down ("" = not known or up) */
    int control_caught_up;
    int topics_state;                          /* 0 not checked yet, 1 as expected, 2 problem */
    char topics_problem[SP_ADMIN_REASON_CAP];  /* what is wrong with them (state 2) */
};

struct sp_admin_hooks {
    /* status: current dependency states. Any thread (an MHD worker). */
    void (*status)(void *ctx, struct sp_admin_status *out);
    /* metrics: append the whole exposition to b. Any thread. */
    void (*metrics)(void *ctx, struct tg_buf *b);
    void *ctx;
};

struct sp_admin_http;

/* sp_admin_http_start: listen on host:port (borrowed strings, copied). master_key may be "".
 * pg_dsn is used for the /spend queries with deadline pg_timeout_ms. Returns new
 * (sp_admin_http_stop) or NULL with err. */
struct sp_admin_http *sp_admin_http_start(const char *host, int port, const char *master_key,
                                          const char *pg_dsn, int pg_timeout_ms,
                                          const struct sp_admin_hooks *hooks, char *err,
                                          size_t errlen);

/* sp_admin_http_stop: stop the daemon and free; *h set to NULL; accepts NULL. */
void sp_admin_http_stop(struct sp_admin_http **h);

/* sp_admin_http_valid_day: 1 when s is a real calendar date "YYYY-MM-DD". */
int sp_admin_http_valid_day(const char *s);

#endif
