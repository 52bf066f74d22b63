#include "admin_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "pg_sink.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_limits.h"
#include "tg_log.h"
#include "tg_metrics.h"

#define SP_ADMIN_THREADS 2
#define SP_ADMIN_CONN_MAX 256
#define SP_ADMIN_CONN_TIMEOUT_S 30
#define SP_ADMIN_BODY_MAX_BYTES (1024u * 1024u) /* /spend answers; longer is refused (500) */
#define SP_ADMIN_REPORT_ROWS_MAX 1000

struct sp_admin_http {
    struct MHD_Daemon *d;
    struct sp_admin_hooks hooks;
    char master_key[256];
    pthread_mutex_t pg_mu; /* one /spend query at a time on pg */
    struct sp_pg *pg;
};

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned int status,
                               const char *ctype, const char *body, size_t len)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned int status,
                                    const char *body)
{
    return respond(conn, status, "application/json", body, strlen(body));
}

/* respond_error: {"error":{"message":..,"param":..}}; message and param are constants or
 * validated short parameter names, never request data. */
static enum MHD_Result respond_error(struct MHD_Connection *conn, unsigned int status,
                                     const char *message, const char *param)
{
    char body[512];
    if (param)
        snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"param\":\"%s\"}}",
                 message, param);
    else
        snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\"}}", message);
    return respond_json(conn, status, body);
}

/* authorized: the bearer token against the master key, compared through their SHA-256
 * digests in constant time (tg_secret_eq): neither the key's length nor a matching prefix shows
 * in the answer time. */
static int authorized(struct sp_admin_http *h, struct MHD_Connection *conn)
{
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *tok;

    if (h->master_key[0] == '\0' || !auth || strncasecmp(auth, "Bearer ", 7) != 0)
        return 0;
    tok = auth + 7;
    return tg_secret_eq(tok, strlen(tok), h->master_key, strlen(h->master_key));
}

int sp_admin_http_valid_day(const char *s)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, m, d;

    if (!s || strlen(s) != 10 || s[4] != '-' || s[7] != '-')
        return 0;
    for (int i = 0; i < 10; i++)
        if (i != 4 && i != 7 && (s[i] < '0' || s[i] > '9'))
            return 0;
    y = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0');
    m = (s[5] - '0') * 10 + (s[6] - '0');
    d = (s[8] - '0') * 10 + (s[9] - '0');
    if (y < 1970 || m < 1 || m > 12 || d < 1)
        return 0;
    int max = mdays[m - 1];
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        max = 29;
    return d <= max;
}

static enum MHD_Result pg_error(struct MHD_Connection *conn, int rc)
{
    if (rc == TG_ENOTFOUND)
        return respond_error(conn, MHD_HTTP_NOT_FOUND, "no spend log with this call_id", NULL);
    if (rc == TG_EUNAVAIL || rc == TG_ETIMEOUT || rc == TG_EAGAIN)
        return respond_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "postgres unavailable", NULL);
    return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "query failed", NULL);
}

/* answer_query: the answer to an admin query that returned rc and wrote its JSON into b: the
 * pg_error answer when rc < 0, 500 when the JSON did not fit, else 200 with the JSON. Finishes
 * b (caller storage) on every path. */
static enum MHD_Result answer_query(struct MHD_Connection *conn, int rc, struct tg_buf *b)
{
    enum MHD_Result ret;

    if (rc < 0)
        ret = pg_error(conn, rc);
    else if (b->truncated)
        ret = respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "answer too large", NULL);
    else
        ret = respond(conn, MHD_HTTP_OK, "application/json", b->data, b->len);
    tg_buf_fini(b);
    return ret;
}

static enum MHD_Result spend_logs(struct sp_admin_http *h, struct MHD_Connection *conn)
{
    const char *id = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "call_id");
    struct tg_buf b;
    int rc;

    if (!id || !tg_uuid_valid(id))
        return respond_error(conn, MHD_HTTP_BAD_REQUEST, "call_id must be a UUID", "call_id");
    if (tg_buf_init(&b, SP_ADMIN_BODY_MAX_BYTES) < 0)
        return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory", NULL);
    pthread_mutex_lock(&h->pg_mu);
    rc = sp_pg_spend_log_json(h->pg, id, &b);
    pthread_mutex_unlock(&h->pg_mu);
    return answer_query(conn, rc, &b);
}

static enum MHD_Result spend_report(struct sp_admin_http *h, struct MHD_Connection *conn)
{
    const char *g = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "group_by");
    const char *from = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "from");
    const char *to = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "to");
    struct tg_buf b;
    int rc;

    if (!g || (strcmp(g, "key") != 0 && strcmp(g, "team") != 0 && strcmp(g, "model") != 0))
        return respond_error(conn, MHD_HTTP_BAD_REQUEST, "group_by must be key, team or model",
                             "group_by");
    if (!sp_admin_http_valid_day(from))
        return respond_error(conn, MHD_HTTP_BAD_REQUEST, "from must be a date YYYY-MM-DD",
                             "from");
    if (!sp_admin_http_valid_day(to))
        return respond_error(conn, MHD_HTTP_BAD_REQUEST, "to must be a date YYYY-MM-DD", "to");
    if (strcmp(from, to) > 0)
        return respond_error(conn, MHD_HTTP_BAD_REQUEST, "to must not be before from", "to");
    if (tg_buf_init(&b, SP_ADMIN_BODY_MAX_BYTES) < 0)
        return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory", NULL);
    pthread_mutex_lock(&h->pg_mu);
    rc = sp_pg_spend_report_json(h->pg, g, from, to, SP_ADMIN_REPORT_ROWS_MAX, &b);
    pthread_mutex_unlock(&h->pg_mu);
    return answer_query(conn, rc, &b);
}

static enum MHD_Result readiness(struct sp_admin_http *h, struct MHD_Connection *conn)
{
    struct sp_admin_status st;
    char body[256 + 6 * SP_ADMIN_REASON_CAP];
    char kreason[2 * SP_ADMIN_REASON_CAP], rreason[2 * SP_ADMIN_REASON_CAP];
    char treason[2 * SP_ADMIN_REASON_CAP];
    static const char *const topics[3] = {"unchecked", "ok", "problem"};
    int ready;

    memset(&st, 0, sizeof(st));
    if (h->hooks.status)
        h->hooks.status(h->hooks.ctx, &st);
    ready = st.kafka_up && st.postgres_up;
    st.kafka_reason[sizeof(st.kafka_reason) - 1] = '\0';
    st.redis_reason[sizeof(st.redis_reason) - 1] = '\0';
    tg_log_json_plain(kreason, sizeof(kreason), st.kafka_reason);
    tg_log_json_plain(rreason, sizeof(rreason), st.redis_reason);
    st.topics_problem[sizeof(st.topics_problem) - 1] = '\0';
    tg_log_json_plain(treason, sizeof(treason), st.topics_state == 2 ? st.topics_problem : "");
    if (st.topics_state < 0 || st.topics_state > 2)
        st.topics_state = 0;
    snprintf(body, sizeof(body),
             "{\"ready\":%s,\"kafka\":\"%s\",\"postgres\":\"%s\",\"redis\":\"%s\","
             "\"control_topic\":\"%s\",\"topics\":\"%s\"%s%s%s%s%s%s%s%s%s}",
             ready ? "true" : "false", st.kafka_up ? "up" : "down",
             st.postgres_up ? "up" : "down", st.redis_up ? "up" : "down",
             st.control_caught_up ? "caught_up" : "replaying", topics[st.topics_state],
             kreason[0] != '\0' ? ",\"kafka_reason\":\"" : "", kreason,
             kreason[0] != '\0' ? "\"" : "", rreason[0] != '\0' ? ",\"redis_reason\":\"" : "",
             rreason, rreason[0] != '\0' ? "\"" : "",
             treason[0] != '\0' ? ",\"topics_reason\":\"" : "", treason,
             treason[0] != '\0' ? "\"" : "");
    return respond_json(conn, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, body);
}

static enum MHD_Result metrics(struct sp_admin_http *h, struct MHD_Connection *conn)
{
    struct tg_buf b;
    enum MHD_Result ret;

    if (tg_buf_init(&b, TG_METRICS_BODY_MAX_BYTES) < 0)
        return respond_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory", NULL);
    if (h->hooks.metrics)
        h->hooks.metrics(h->hooks.ctx, &b);
    ret = respond(conn, MHD_HTTP_OK, TG_PROM_CONTENT_TYPE, b.data, b.len);
    tg_buf_fini(&b);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls)
{
    struct sp_admin_http *h = cls;
    static int marker;

    (void)version;
    (void)upload_data;
    if (*con_cls == NULL) {
        *con_cls = &marker;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0; /* no endpoint takes a body: ignore it */
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return respond_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed", NULL);
    if (strcmp(url, "/health/liveness") == 0)
        return respond_json(conn, MHD_HTTP_OK, "{\"status\":\"ok\"}");
    if (strcmp(url, "/health/readiness") == 0)
        return readiness(h, conn);
    if (strcmp(url, "/metrics") == 0)
        return metrics(h, conn);
    if (strcmp(url, "/spend/logs") == 0 || strcmp(url, "/spend/report") == 0) {
        if (!authorized(h, conn))
            return respond_error(conn, MHD_HTTP_UNAUTHORIZED, "master key required", NULL);
        if (strcmp(url, "/spend/logs") == 0)
            return spend_logs(h, conn);
        return spend_report(h, conn);
    }
    return respond_error(conn, MHD_HTTP_NOT_FOUND, "not found", NULL);
}

struct sp_admin_http *sp_admin_http_start(const char *host, int port, const char *master_key,
                                          const char *pg_dsn, int pg_timeout_ms,
                                          const struct sp_admin_hooks *hooks, char *err,
                                          size_t errlen)
{
    struct sp_admin_http *h = calloc(1, sizeof(*h));
    struct sockaddr_in sa;

    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&h->pg_mu, NULL);
    if (hooks)
        h->hooks = *hooks;
    snprintf(h->master_key, sizeof(h->master_key), "%s", master_key ? master_key : "");
    h->pg = sp_pg_create(pg_dsn, pg_timeout_ms, err, errlen);
    if (!h->pg)
        goto fail;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(err, errlen, "listen: %s is not an IPv4 address", host);
        goto fail;
    }
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY, (uint16_t)port,
                            NULL, NULL, handler, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)SP_ADMIN_THREADS,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)SP_ADMIN_CONN_MAX,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)SP_ADMIN_CONN_TIMEOUT_S,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "listen: cannot bind %s:%d", host, port);
        goto fail;
    }
    return h;
fail:
    sp_admin_http_stop(&h);
    return NULL;
}

void sp_admin_http_stop(struct sp_admin_http **hp)
{
    struct sp_admin_http *h;

    if (!hp || !*hp)
        return;
    h = *hp;
    if (h->d)
        MHD_stop_daemon(h->d);
    sp_pg_destroy(&h->pg);
    pthread_mutex_destroy(&h->pg_mu);
    free(h);
    *hp = NULL;
}
