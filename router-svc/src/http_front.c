/* http_front: router-svc's HTTP side. See http_front.h. */
#include "http_front.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api_error.h"
#include "call.h"
#include "health.h"
#include "hsrv.h"
#include "key_api.h"
#include "teams.h"
#include "keys.h"
#include "rt_metrics.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"
#include "upstream.h"

/* Request line plus headers (names, values, separators) accepted. Larger requests are answered
 * 431 in the API's error shape by access_cb (counted as reject reason headers_too_large); past
 * RT_FRONT_HEAD_HARD_MAX_BYTES the HTTP server answers 431 itself without reading further. */
#define RT_FRONT_HEADER_MAX_BYTES (8u * 1024u)
#define RT_FRONT_HEAD_HARD_MAX_BYTES (16u * 1024u)
/* Upstream/HTTP run pairs per loop turn while connections keep being resumed. */
#define RT_FRONT_RUNS_PER_TURN 8
/* Tags of the loop's own fds in its epoll set (the HTTP server's objects are pointers). */
#define RT_FRONT_TAG_STOP 1u
#define RT_FRONT_TAG_UPSTREAM 2u
/* Upstream slots per loop beyond the in-flight cap (transfers finishing while new ones start). */
#define RT_FRONT_EXTRA_TRANSFERS 64
/* File descriptors beyond the client and provider connections (rt_front_fds_needed). */
#define RT_FRONT_FDS_RESERVE 256
/* Connections the admin listener (tollgate.admin_listen) takes at once. */
#define RT_FRONT_ADMIN_CONNECTIONS 64u
/* Messages of the front's own answers, bytes. */
#define RT_FRONT_MESSAGE_MAX 512

struct admin_req;
struct worker;

static void worker_wake(struct worker *w);

/* One event loop per thread: the HTTP server (hsrv) and an embedded upstream share the thread
 * and its epoll set, so a request never changes threads between the client and the provider.
 * The loops' listening sockets share the port with SO_REUSEPORT. */
struct worker {
    struct rt_front *f;
    struct hs_server *srv;
    struct hs_server *admin; /* the admin listener (first loop only, when configured) */
    struct rt_upstream *up;
    struct rt_call_env env; /* what this loop's calls share */
    pthread_t thread;
    int started;
    int epfd;     /* client sockets, the upstream's epoll fd, the stop eventfd */
    int stopfd;   /* eventfd: stop, quiesce or an answer in the mailbox */
    int quiesced; /* worker thread only */
    pthread_mutex_t mbox_mu;
    struct admin_req *mbox; /* (mbox_mu) key-API answers from other threads, for this loop */
};

struct rt_front {
    struct rt_front_deps d;
    uint16_t port;
    uint16_t admin_port; /* 0 when there is no admin listener */
    unsigned nworkers;
    struct worker *workers; /* nworkers */
    struct hs_ipcap *ipcap; /* connections per source address, shared by the loops; NULL when
                             * max_connections_per_ip is max_connections (no cap of its own) */
    char master_hash[TG_SHA256_HEX_LEN + 1]; /* the master key's SHA-256, "" without one */
    _Atomic int64_t in_flight;
    _Atomic int stopping;
    _Atomic int quiesced;
    _Atomic int loops_stop;
};

/* A key admin API request (no call: no routing, no event). Lives on its loop's thread; the key
 * API may answer from another thread (the control topic's), and that answer comes back through
 * the loop's mailbox, so the request needs no lock of its own. */
enum admin_state { ADMIN_BODY = 0, ADMIN_WAIT, ADMIN_ANSWERED, ADMIN_DONE };

struct admin_req {
    enum rt_req_kind kind; /* RT_REQ_ADMIN (first: see call.h) */
    struct worker *w;
    struct hs_conn *conn; /* NULL once the request ended */
    int refs;             /* the connection's, the pending answer's (loop thread) */
    enum admin_state state;
    int suspended;
    char path[32];
    char *body;
    size_t body_len, body_alloc;
    /* the key API's answer: written by the thread that answers before it posts the request to
     * the mailbox, read by the loop after it took it from there */
    int status;
    char *answer;
    size_t answer_len;
    struct admin_req *mnext; /* mailbox */
};

/* ------------------------------------------------------------------ request handling */

static int endpoint_of(const char *url, enum rt_api *api, const char **name, int *anthropic)
{
    *anthropic = 0;
    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/chat/completions") == 0) {
        *api = RT_API_CHAT;
        *name = "/v1/chat/completions";
    } else if (strcmp(url, "/v1/embeddings") == 0 || strcmp(url, "/embeddings") == 0) {
        *api = RT_API_EMBEDDINGS;
        *name = "/v1/embeddings";
    } else if (strcmp(url, "/v1/responses") == 0 || strcmp(url, "/responses") == 0) {
        *api = RT_API_RESPONSES;
        *name = "/v1/responses";
    } else if (strcmp(url, "/v1/messages") == 0) {
        *api = RT_API_MESSAGES;
        *name = "/v1/messages";
        *anthropic = 1;
    } else if (strcmp(url, "/v1/messages/count_tokens") == 0) {
        *api = RT_API_MESSAGES;
        *name = RT_COUNT_TOKENS_ENDPOINT;
        *anthropic = 1;
    } else {
        return -1;
    }
    return 0;
}

/* The credential of a request: Authorization: Bearer <token>, else x-api-key, blanks around it
 * removed. NULL when neither header carries one. */
static const char *credential(struct hs_conn *conn, size_t *len)
{
    const char *h = hs_header(conn, "Authorization");
    const char *tok = NULL;
    size_t tlen;

    if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0)
        tok = h + 7;
    if (tok == NULL)
        tok = hs_header(conn, "x-api-key");
    if (tok == NULL)
        return NULL;
    while (*tok == ' ')
        tok++;
    tlen = strlen(tok);
    while (tlen > 0 && tok[tlen - 1] == ' ')
        tlen--;
    *len = tlen;
    return tok;
}

/* What a connection remembers of its last credential (hs_conn_memo): the token and its
 * SHA-256, so that a client sending the same key on a kept-alive connection costs no hash a
 * request. A longer token is hashed every time. */
#define CRED_MEMO_TOKEN_MAX 127
struct cred_memo {
    uint8_t len; /* 0: nothing remembered */
    char tok[CRED_MEMO_TOKEN_MAX];
    char hash[TG_SHA256_HEX_LEN + 1];
};
_Static_assert(sizeof(struct cred_memo) <= HS_CONN_MEMO_BYTES, "the memo fits the connection's");

/* The SHA-256 (hex) of the credential tok[0..tlen) (tlen > 0), from the connection's memo when
 * it is the token its last request sent. Compared in constant time: only the client's own
 * previous token on this connection is compared, and only where the lengths are equal. */
static const char *cred_digest(struct hs_conn *conn, const char *tok, size_t tlen)
{
    struct cred_memo *m = hs_conn_memo(conn);

    if (m->len != 0 && m->len == tlen && tg_bytes_eq(m->tok, tok, tlen))
        return m->hash;
    tg_sha256_hex(tok, tlen, m->hash);
    m->len = 0;
    if (tlen <= sizeof(m->tok)) {
        memcpy(m->tok, tok, tlen);
        m->len = (uint8_t)tlen;
    }
    return m->hash;
}

/* 1 when digest is the master key's. Constant time (the digests, not the keys, are compared:
 * neither length nor content of the key shows in the timing). */
static int master_digest(const struct rt_front *f, const char *digest)
{
    return f->master_hash[0] != '\0' && tg_bytes_eq(digest, f->master_hash, TG_SHA256_HEX_LEN);
}

/* 1 when the request carries the master key. */
static int is_master(const struct rt_front *f, struct hs_conn *conn)
{
    size_t tlen = 0;
    const char *tok = credential(conn, &tlen);

    return tok != NULL && tlen > 0 && master_digest(f, cred_digest(conn, tok, tlen));
}

/* Authenticate from the request's headers alone (Authorization: Bearer or x-api-key): the
 * master key, a virtual key of the table, or — only when the config allows it explicitly
 * (tollgate.allow_unauthenticated) — no credential at all. On success *keys holds the table the
 * key was found in (release with rt_keys_release) and *key the key (NULL for the master key or
 * an unauthenticated request). Returns 0, or TG_EAUTH with msg. HTTP threads. */
static int authenticate(struct rt_front *f, struct hs_conn *conn, struct rt_keys_table **keys,
                        const struct rt_key **key, char *msg, size_t cap)
{
    size_t tlen = 0;
    const char *tok = credential(conn, &tlen);
    const char *digest;

    *keys = NULL;
    *key = NULL;
    if (tok == NULL || tlen == 0) {
        if (f->d.cfg->allow_unauthenticated)
            return 0;
        snprintf(msg, cap, "No API key provided. Send Authorization: Bearer <key> or x-api-key.");
        return TG_EAUTH;
    }
    digest = cred_digest(conn, tok, tlen);
    if (master_digest(f, digest))
        return 0;
    *keys = rt_keys_acquire(f->d.keys);
    *key = rt_keys_lookup_hash(*keys, digest);
    if (*key == NULL) {
        snprintf(msg, cap, "Invalid API key.");
        return TG_EAUTH;
    }
    if ((*key)->expires_epoch_ms > 0 && (int64_t)tg_now_epoch_ms() >= (*key)->expires_epoch_ms) {
        *key = NULL;
        snprintf(msg, cap, "API key expired.");
        return TG_EAUTH;
    }
    if ((*key)->admin_blocked) {
        *key = NULL;
        snprintf(msg, cap, "API key is blocked (an admin's /key/unblock lifts it).");
        return TG_EAUTH;
    }
    return 0;
}

/* ------------------------------------------------------------------ GET endpoints */

/* Queue body (taken; NULL: out of memory) as the answer. Returns what the handler returns. */
static int answer_text(struct hs_conn *conn, int status, const char *ctype, char *body)
{
    struct hs_response *r;

    if (body == NULL)
        return HS_NO;
    r = hs_response_buffer(body, strlen(body)); /* takes body */
    if (r == NULL)
        return HS_NO;
    HS_RESPONSE_HEADER(r, "Content-Type", ctype);
    return hs_respond(conn, status, r);
}

/* The front's own error answer in the API's shape (no call: no event). */
static int answer_front_error(struct rt_front *f, struct hs_conn *conn, int anthropic, int status,
                              const char *code, const char *message)
{
    return answer_text(conn, status, "application/json",
                       rt_api_error_body(f->d.mask, anthropic, status, code, message));
}

static int serve_models(struct rt_front *f, struct hs_conn *conn)
{
    struct {
        struct rt_keys_table *keys;
        const struct rt_key *key;
    } tmp = {NULL, NULL};
    char msg[RT_FRONT_MESSAGE_MAX];
    json_t *data = json_array();
    json_t *out;
    char *s;
    const struct rt_config *cfg = f->d.cfg;
    struct rt_teams_table *teams = NULL;
    const struct rt_team_spec *team = NULL; /* the key's team: its models apply too */

    if (authenticate(f, conn, &tmp.keys, &tmp.key, msg, sizeof(msg)) != 0) {
        rt_keys_release(&tmp.keys);
        json_decref(data);
        rt_metrics_reject(f->d.metrics, RT_REJECT_AUTH);
        return answer_front_error(f, conn, 0, 401, "invalid_api_key", msg);
    }
    if (tmp.key != NULL && tmp.key->team_id[0] != '\0' && f->d.teams != NULL) {
        teams = rt_teams_acquire(f->d.teams);
        team = rt_teams_lookup(teams, tmp.key->team_id);
    }
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const char *g = cfg->deployments[i].group;
        int seen = 0;

        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(cfg->deployments[j].group, g) == 0) {
                seen = 1;
                break;
            }
        }
        if (!seen && rt_key_allows(tmp.key, g) && rt_team_allows(team, g))
            json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", g, "object", "model",
                                                  "created", 0, "owned_by", "tollgate"));
    }
    for (uint32_t i = 0; i < cfg->n_aliases; i++) {
        if (cfg->aliases[i].hidden || !rt_key_allows(tmp.key, cfg->aliases[i].alias) ||
            !(rt_team_allows(team, cfg->aliases[i].alias) ||
              rt_team_allows(team, cfg->aliases[i].group)))
            continue;
        json_array_append_new(data,
                              json_pack("{s:s,s:s,s:i,s:s}", "id", cfg->aliases[i].alias, "object",
                                        "model", "created", 0, "owned_by", "tollgate"));
    }
    if (tmp.key != NULL) {
        for (uint32_t i = 0; i < tmp.key->n_aliases; i++) {
            if (!rt_key_allows(tmp.key, tmp.key->aliases[i].alias) ||
                !(rt_team_allows(team, tmp.key->aliases[i].alias) ||
                  rt_team_allows(team, tmp.key->aliases[i].group)))
                continue;
            json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id",
                                                  tmp.key->aliases[i].alias, "object", "model",
                                                  "created", 0, "owned_by", "tollgate"));
        }
    }
    rt_teams_release(&teams);
    rt_keys_release(&tmp.keys);
    out = json_pack("{s:s,s:o}", "object", "list", "data", data);
    s = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    if (s == NULL)
        s = strdup("{\"object\":\"list\",\"data\":[]}");
    return answer_text(conn, 200, "application/json", s);
}

static int serve_metrics(struct rt_front *f, struct hs_conn *conn)
{
    struct tg_buf b;
    struct rt_upstream_stats us;

    if (tg_buf_init(&b, RT_METRICS_BODY_MAX_BYTES) != 0)
        return HS_NO;
    rt_metrics_write(f->d.metrics, &b);
    memset(&us, 0, sizeof(us));
    for (unsigned i = 0; i < f->nworkers; i++) {
        struct rt_upstream_stats one;

        rt_upstream_get_stats(f->workers[i].up, &one);
        us.submitted += one.submitted;
        us.cancelled += one.cancelled;
        us.timeouts += one.timeouts;
        us.too_big += one.too_big;
        us.full += one.full;
        us.active += one.active;
        us.native += one.native;
        us.native_full += one.native_full;
        us.tls_handshakes += one.tls_handshakes;
        us.tls_resumed += one.tls_resumed;
        us.conns_opened += one.conns_opened;
        for (int k = 0; k < RT_UPC_N; k++)
            us.conns_closed[k] += one.conns_closed[k];
        us.drained += one.drained;
    }
    tg_prom_counter(&b, "tollgate_router_upstream_transfers_total", "Upstream transfers started.",
                    us.submitted);
    tg_prom_counter(&b, "tollgate_router_upstream_native_transfers_total",
                    "Upstream transfers through the built-in HTTP/1.1 client (the rest: libcurl).",
                    us.native);
    tg_prom_counter(&b, "tollgate_router_upstream_native_table_full_total",
                    "Transfers left to libcurl because the built-in client's origin, name or "
                    "TLS context table was full.",
                    us.native_full);
    tg_prom_counter(&b, "tollgate_router_upstream_tls_handshakes_total",
                    "TLS handshakes of the built-in client's provider connections.",
                    us.tls_handshakes);
    tg_prom_counter(&b, "tollgate_router_upstream_tls_resumed_total",
                    "Of those, handshakes that resumed an earlier session.", us.tls_resumed);
    tg_prom_counter(&b, "tollgate_router_upstream_connections_opened_total",
                    "Provider connections the built-in client opened.", us.conns_opened);
    {
        static const char closed[] = "tollgate_router_upstream_connections_closed_total";
        struct tg_label l = {"reason", NULL};

        tg_prom_header(&b, closed, "counter",
                       "Provider connections the built-in client closed, by reason: failed, "
                       "not_reusable (the response ended it), cancelled (its transfer was, and "
                       "the response could not be read out), idle_expired (60 s), peer_closed "
                       "(while idle), pool_full, shutdown.");
        for (int k = 0; k < RT_UPC_N; k++) {
            l.value = rt_upstream_close_reason(k);
            tg_prom_sample_u64(&b, closed, &l, 1, us.conns_closed[k]);
        }
    }
    tg_prom_counter(&b, "tollgate_router_upstream_drained_total",
                    "Cancelled transfers whose provider connection was kept: the rest of the "
                    "response (up to 64 KiB within 2 s, not a stream) read out and dropped.",
                    us.drained);
    tg_prom_counter(&b, "tollgate_router_upstream_cancelled_total",
                    "Upstream transfers aborted (client gone, shutdown).", us.cancelled);
    tg_prom_counter(&b, "tollgate_router_upstream_timeouts_total", "Upstream transfers timed out.",
                    us.timeouts);
    tg_prom_counter(&b, "tollgate_router_upstream_too_big_total",
                    "Upstream responses over max_response_bytes.", us.too_big);
    tg_prom_counter(&b, "tollgate_router_upstream_full_total",
                    "Transfers refused because every upstream slot was in use.", us.full);
    tg_prom_gauge(&b, "tollgate_router_upstream_active", "Upstream transfers in progress.",
                  (double)us.active);
    {
        struct hs_stats hs;

        memset(&hs, 0, sizeof(hs));
        for (unsigned i = 0; i < f->nworkers; i++) {
            struct hs_stats one;

            hs_server_stats(f->workers[i].srv, &one);
            hs.accepted += one.accepted;
            hs.refused += one.refused;
            hs.refused_ip += one.refused_ip;
            hs.bad_requests += one.bad_requests;
            hs.timeouts += one.timeouts;
            hs.header_timeouts += one.header_timeouts;
            hs.body_timeouts += one.body_timeouts;
            hs.send_timeouts += one.send_timeouts;
            hs.linger_cut += one.linger_cut;
            hs.open += one.open;
        }
        tg_prom_counter(&b, "tollgate_router_http_connections_accepted_total",
                        "Client connections accepted.", hs.accepted);
        {
            static const char refused[] = "tollgate_router_http_connections_refused_total";
            struct tg_label l = {"reason", "max_connections"};

            tg_prom_header(&b, refused, "counter",
                           "Client connections answered 503 and closed at once: max_connections "
                           "or max_connections_per_ip reached.");
            tg_prom_sample_u64(&b, refused, &l, 1, hs.refused);
            l.value = "per_ip";
            tg_prom_sample_u64(&b, refused, &l, 1, hs.refused_ip);
        }
        tg_prom_gauge(&b, "tollgate_router_http_connections_open", "Client connections open.",
                      (double)hs.open);
        tg_prom_counter(&b, "tollgate_router_http_bad_requests_total",
                        "Requests the HTTP server answered itself (400, 431, 501, 505): "
                        "malformed, control bytes, headers over 16 KiB, unsupported coding or "
                        "version.",
                        hs.bad_requests);
        tg_prom_counter(&b, "tollgate_router_http_idle_timeouts_total",
                        "Kept-alive client connections closed idle between requests "
                        "(keepalive_timeout_ms).",
                        hs.timeouts);
        {
            static const char tmo[] = "tollgate_router_http_timeouts_total";
            struct tg_label l = {"phase", "header"};

            tg_prom_header(&b, tmo, "counter",
                           "Client connections closed by a deadline: the head "
                           "(header_timeout_ms, 408), the body (body_timeout_ms and "
                           "body_min_rate, 408), a response the client took nothing of "
                           "(send_timeout_ms).");
            tg_prom_sample_u64(&b, tmo, &l, 1, hs.header_timeouts);
            l.value = "body";
            tg_prom_sample_u64(&b, tmo, &l, 1, hs.body_timeouts);
            l.value = "send";
            tg_prom_sample_u64(&b, tmo, &l, 1, hs.send_timeouts);
        }
        tg_prom_counter(&b, "tollgate_router_http_linger_cut_total",
                        "Connections closed after dropping linger_max_bytes the client still "
                        "sent after an early answer (401, 413).",
                        hs.linger_cut);
    }
    return answer_text(conn, 200, TG_PROM_CONTENT_TYPE, b.data); /* takes b.data */
}

static int serve_get(struct rt_front *f, struct hs_conn *conn, const char *url)
{
    if (strcmp(url, "/health/liveness") == 0)
        return answer_text(conn, 200, "application/json", strdup("{\"status\":\"alive\"}"));
    if (strcmp(url, "/health/readiness") == 0) {
        struct tg_buf b;

        if (tg_buf_init(&b, 1024) != 0)
            return HS_NO;
        rt_health_readiness_json(f->d.health, &b);
        return answer_text(conn, rt_health_ready(f->d.health) ? 200 : 503, "application/json",
                           b.data);
    }
    if (strcmp(url, "/metrics") == 0)
        return serve_metrics(f, conn);
    if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/models") == 0)
        return serve_models(f, conn);
    return answer_front_error(f, conn, 0, 404, "not_found", "Unknown path");
}

/* ------------------------------------------------------------------ key admin API */

static void admin_unref(struct admin_req *a)
{
    if (--a->refs > 0)
        return;
    free(a->body);
    free(a->answer);
    free(a);
}

/* The key API's answer (any thread; once per rt_key_api_handle): copied into the request, which
 * goes to its loop's mailbox; the loop resumes the connection (mailbox_run). */
static void admin_done(int status, const char *body, size_t len, void *ud)
{
    struct admin_req *a = ud;
    struct worker *w = a->w;
    char *copy = malloc(len + 1);

    if (copy != NULL) {
        memcpy(copy, body, len);
        copy[len] = '\0';
    }
    a->answer = copy;
    a->answer_len = copy != NULL ? len : 0;
    a->status = copy != NULL ? status : 500;
    pthread_mutex_lock(&w->mbox_mu);
    a->mnext = w->mbox;
    w->mbox = a;
    pthread_mutex_unlock(&w->mbox_mu);
    worker_wake(w);
}

/* The loop takes the answers posted to its mailbox: each request is resumed to send its answer
 * (when its connection is still there), and the answer's reference dropped. Loop thread. */
static void mailbox_run(struct worker *w)
{
    struct admin_req *list;

    pthread_mutex_lock(&w->mbox_mu);
    list = w->mbox;
    w->mbox = NULL;
    pthread_mutex_unlock(&w->mbox_mu);
    while (list != NULL) {
        struct admin_req *a = list;

        list = a->mnext;
        a->state = ADMIN_ANSWERED;
        if (a->conn != NULL && a->suspended) {
            a->suspended = 0;
            hs_resume(a->conn);
        }
        admin_unref(a);
    }
}

/* GET /key/list: its query arguments (LiteLLM's page, size, team_id, key_alias,
 * return_full_object) as the JSON body the key API reads. Returns 0, or -1 out of memory. */
static int list_query(struct admin_req *a)
{
    static const char *const names[] = {"page", "size", "team_id", "key_alias",
                                        "return_full_object"};
    json_t *q = json_object();
    char *text;

    if (q == NULL)
        return -1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = hs_query_arg(a->conn, names[i]);

        if (v != NULL)
            json_object_set_new(q, names[i], json_string(v));
    }
    text = json_dumps(q, JSON_COMPACT);
    json_decref(q);
    if (text == NULL)
        return -1;
    free(a->body);
    a->body = text;
    a->body_len = strlen(text);
    a->body_alloc = a->body_len + 1;
    return 0;
}

/* Admin requests (the master key was checked from the headers): the body is read like any other
 * (capped); then the key API answers, possibly after the control topic confirmed the change (the
 * connection is suspended meanwhile, holding no thread). Never logs a body or a key parameter. */
static int admin_step(struct rt_front *f, struct admin_req *a, const char *method,
                      const char *upload, size_t *upload_size)
{
    if (upload != NULL) {
        size_t n = *upload_size;

        *upload_size = 0;
        if (a->state != ADMIN_BODY)
            return HS_YES;
        if (a->body_len + n > f->d.cfg->max_body_bytes) {
            char msg[160];

            a->state = ADMIN_DONE;
            rt_metrics_reject(f->d.metrics, RT_REJECT_BODY_TOO_LARGE);
            snprintf(msg, sizeof(msg), "Request body too large: limit is %llu bytes",
                     (unsigned long long)f->d.cfg->max_body_bytes);
            return answer_front_error(f, a->conn, 0, 413, "request_too_large", msg);
        }
        if (a->body_len + n + 1 > a->body_alloc) {
            size_t want = a->body_alloc ? a->body_alloc * 2 : 4096;
            char *nb;

            while (want < a->body_len + n + 1)
                want *= 2;
            nb = realloc(a->body, want);
            if (nb == NULL)
                return HS_NO;
            a->body = nb;
            a->body_alloc = want;
        }
        memcpy(a->body + a->body_len, upload, n);
        a->body_len += n;
        return HS_YES;
    }
    switch (a->state) {
    case ADMIN_BODY:
        a->state = ADMIN_WAIT;
        a->refs++; /* held by the pending answer until the mailbox hands it back */
        a->suspended = 1;
        hs_suspend(a->conn);
        if (strcmp(a->path, "/key/list") == 0 && strcmp(method, "GET") == 0 &&
            list_query(a) != 0)
            return HS_NO;
        rt_key_api_handle(f->d.key_api, method, a->path,
                          hs_query_arg(a->conn, strcmp(a->path, "/team/info") == 0   ? "team_id"
                                                : strcmp(a->path, "/team/list") == 0 ? "team_alias"
                                                                                     : "key"),
                          a->body != NULL ? a->body : "", a->body_len, admin_done, a);
        return HS_YES;
    case ADMIN_ANSWERED: {
        char *body = a->answer;

        a->answer = NULL;
        a->state = ADMIN_DONE;
        if (body == NULL)
            return answer_front_error(f, a->conn, 0, 500, "internal_error", "out of memory");
        return answer_text(a->conn, a->status, "application/json", body);
    }
    default:
        return HS_YES; /* resumed early, or answered */
    }
}

/* ------------------------------------------------------------------ HTTP server callbacks */

/* The first handler call of a request: its headers are complete. Routes the path; an API
 * request is authenticated from its headers before anything is spent on it, then becomes a
 * call. */
/* Paths of the admin side: /metrics and the key API. */
static int is_admin_path(const char *url)
{
    return strcmp(url, "/metrics") == 0 || rt_key_api_is_admin_path(url);
}

/* on_admin: the request came to the admin listener. With one configured, the admin paths are
 * served there only (the public listener answers them 404, as if they did not exist), and the
 * admin listener serves nothing but them and the health checks. */
static int request_begin(struct worker *w, struct hs_conn *conn, const char *url,
                         const char *method, void **con_cls, int on_admin)
{
    struct rt_front *f = w->f;
    enum rt_api api;
    const char *name;
    int anthropic;

    if (f->d.cfg->admin_listen[0] != '\0' &&
        (on_admin ? !is_admin_path(url) && strncmp(url, "/health/", 8) != 0 : is_admin_path(url)))
        return answer_front_error(f, conn, 0, 404, "not_found", "Unknown path");

    if (hs_head_bytes(conn) > RT_FRONT_HEADER_MAX_BYTES) {
        /* answered at the HTTP layer, like the server's own 431: not a call, no event */
        char msg[96];

        rt_metrics_reject(f->d.metrics, RT_REJECT_HEADERS_TOO_LARGE);
        snprintf(msg, sizeof(msg), "Request headers too large: limit is %u bytes",
                 RT_FRONT_HEADER_MAX_BYTES);
        return answer_front_error(f, conn, strcmp(url, "/v1/messages") == 0, 431,
                                  "request_header_fields_too_large", msg);
    }
    if (f->d.key_api != NULL && f->d.cfg->master_key[0] != '\0' && rt_key_api_is_admin_path(url) &&
        (strcmp(method, "GET") == 0 || strcmp(method, "POST") == 0)) {
        struct admin_req *a;

        /* the master key from the headers, before the body is read */
        if (!is_master(f, conn)) {
            rt_metrics_reject(f->d.metrics, RT_REJECT_AUTH);
            return answer_front_error(f, conn, 0, 401, "invalid_api_key",
                                      "The key API needs the master key: Authorization: Bearer "
                                      "<master_key>.");
        }
        a = calloc(1, sizeof(*a));
        if (a == NULL)
            return HS_NO;
        a->kind = RT_REQ_ADMIN;
        a->w = w;
        a->conn = conn;
        a->refs = 1; /* the connection's */
        snprintf(a->path, sizeof(a->path), "%s", url);
        *con_cls = a;
        {
            const char *cl = hs_header(conn, "Content-Length");

            if (cl != NULL && strtoull(cl, NULL, 10) > f->d.cfg->max_body_bytes) {
                char msg[160];

                a->state = ADMIN_DONE;
                rt_metrics_reject(f->d.metrics, RT_REJECT_BODY_TOO_LARGE);
                snprintf(msg, sizeof(msg), "Request body too large: limit is %llu bytes",
                         (unsigned long long)f->d.cfg->max_body_bytes);
                return answer_front_error(f, conn, 0, 413, "request_too_large", msg);
            }
        }
        return HS_YES;
    }
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        return serve_get(f, conn, url);
    if (strcmp(method, "POST") != 0 || endpoint_of(url, &api, &name, &anthropic) != 0)
        return answer_front_error(f, conn, 0, 404, "not_found", "Unknown path or method");
    /* While draining (SIGTERM) a request that arrives on a kept-alive connection is still
     * served, with Connection: close, so that the client reconnects elsewhere; only after the
     * grace period (stopping) is it refused. */
    if (atomic_load(&f->stopping)) {
        /* Past the grace period: close the kept-alive connection without an answer. The request
         * was not processed, so the client may retry it on a new connection (HTTP clients do so
         * for a reused connection that closes before any response byte). */
        rt_metrics_reject(f->d.metrics, RT_REJECT_SHUTTING_DOWN);
        return HS_NO;
    }
    /* The key, from the headers alone, before anything is spent on the request: no in-flight
     * slot, body buffer, 100-continue or parse for an unauthenticated one. Its 401 is not a call
     * (no event: nothing to bill, and no way for an anonymous client to write to the spend
     * pipeline); the server closes the connection after dropping what the client still sends,
     * bounded. */
    {
        struct rt_keys_table *keys = NULL;
        const struct rt_key *key = NULL;
        char msg[RT_FRONT_MESSAGE_MAX];
        struct rt_call *c;

        if (authenticate(f, conn, &keys, &key, msg, sizeof(msg)) != 0) {
            rt_keys_release(&keys);
            rt_metrics_reject(f->d.metrics, RT_REJECT_AUTH);
            return answer_front_error(f, conn, anthropic, 401, "invalid_api_key", msg);
        }
        c = rt_call_create(&w->env, conn, api, name, anthropic, keys, key);
        if (c == NULL)
            return HS_NO;
        *con_cls = c;
        return rt_call_start(c);
    }
}

static int front_access(struct worker *w, int on_admin, struct hs_conn *conn, const char *url,
                        const char *method, const char *upload, size_t *upload_size, void **con_cls)
{
    enum rt_req_kind *kind = *con_cls;

    if (kind == NULL)
        return request_begin(w, conn, url, method, con_cls, on_admin);
    if (*kind == RT_REQ_ADMIN)
        return admin_step(w->f, *con_cls, method, upload, upload_size);
    if (upload != NULL)
        return rt_call_body(*con_cls, upload, upload_size);
    return rt_call_run(*con_cls);
}

static int access_cb(void *cls, struct hs_conn *conn, const char *url, const char *method,
                     const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    return front_access(cls, 0, conn, url, method, upload, upload_size, con_cls);
}

static int admin_access_cb(void *cls, struct hs_conn *conn, const char *url, const char *method,
                           const char *version, const char *upload, size_t *upload_size,
                           void **con_cls)
{
    (void)version;
    return front_access(cls, 1, conn, url, method, upload, upload_size, con_cls);
}

static void completed_cb(void *cls, struct hs_conn *conn, void **con_cls, enum hs_toe toe)
{
    enum rt_req_kind *kind = *con_cls;

    (void)cls;
    (void)conn;
    if (kind == NULL)
        return;
    *con_cls = NULL;
    if (*kind == RT_REQ_ADMIN) {
        struct admin_req *a = (struct admin_req *)(void *)kind;

        a->conn = NULL; /* the mailbox does not resume it any more */
        a->suspended = 0;
        admin_unref(a);
        return;
    }
    rt_call_completed((struct rt_call *)(void *)kind, toe);
}

/* ------------------------------------------------------------------ lifecycle */

static int parse_listen(const char *s, struct sockaddr_in *sa, char *err, size_t errlen)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    long port;
    char *end;

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (colon == NULL || (size_t)(colon - s) >= sizeof(host)) {
        snprintf(err, errlen, "listen: expected host:port");
        return TG_EINVAL;
    }
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
        snprintf(err, errlen, "listen: bad port");
        return TG_EINVAL;
    }
    if (host[0] == '\0' || strcmp(host, "*") == 0)
        snprintf(host, sizeof(host), "0.0.0.0");
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        snprintf(err, errlen, "listen: host must be an IPv4 address");
        return TG_EINVAL;
    }
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

/* After a run of the loop with events batched: the run's events go to the spool (one write),
 * then the responses held for them; again while sending them completed more requests, bounded
 * per turn (what is left is held to the next turn, which does not sleep). */
static void run_flush(struct worker *w)
{
    const struct rt_front_deps *d = &w->f->d;

    if (d->batch_flush == NULL)
        return;
    for (int k = 0; k < RT_FRONT_RUNS_PER_TURN; k++) {
        int again;

        d->batch_flush();
        again = hs_server_release(w->srv);
        if (w->admin != NULL)
            again |= hs_server_release(w->admin);
        if (!again && !d->batch_pending())
            break;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct rt_front *f = w->f;
    struct epoll_event evs[64];

    pthread_setname_np(pthread_self(), "tg-loop"); /* in top, perf and /proc/PID/task */
    if (f->d.batch_begin != NULL && f->d.batch_begin(f->d.batch_ud) != 0)
        TG_ERROR("event=event_batch_off reason=out_of_memory"); /* each event its own write */
    while (!atomic_load(&f->loops_stop)) {
        int t = rt_upstream_timeout_ms(w->up);
        int ht = hs_server_timeout_ms(w->srv);
        int n;

        if (ht >= 0 && (t < 0 || ht < t))
            t = ht;
        if (f->d.batch_pending != NULL && f->d.batch_pending())
            t = 0;
        if (w->admin != NULL) {
            ht = hs_server_timeout_ms(w->admin);
            if (ht >= 0 && (t < 0 || ht < t))
                t = ht;
        }
        n = epoll_wait(w->epfd, evs, 64, t);
        tg_loop_tick(); /* the turn's clock: timers and stamps read it, not the clock */
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;

            if (tag == RT_FRONT_TAG_STOP) {
                uint64_t v;
                ssize_t r = read(w->stopfd, &v, sizeof(v));

                (void)r;
            } else if (tag >= HS_TAG_LIMIT) {
                hs_server_event(w->admin != NULL ? hs_event_server(&evs[i]) : w->srv, &evs[i]);
            }
            /* RT_FRONT_TAG_UPSTREAM: rt_upstream_run below */
        }
        if (atomic_load(&f->quiesced) && !w->quiesced) {
            hs_server_quiesce(w->srv);
            if (w->admin != NULL)
                hs_server_quiesce(w->admin);
            w->quiesced = 1;
        }
        mailbox_run(w);
        hs_server_housekeep(w->srv); /* bounded: a burst of it spreads over turns */
        if (w->admin != NULL) {
            hs_server_housekeep(w->admin);
            hs_server_run(w->admin);
        }
        /* providers, then the connections their results resumed; repeated while runs resume
         * connections (a resumed request may start the next attempt), bounded per turn. The
         * events of each run go out with the responses they hold after that run, not at the
         * end of the turn: a response waits for the completions of its own run only. */
        for (int k = 0; k < RT_FRONT_RUNS_PER_TURN; k++) {
            int more;

            rt_upstream_run(w->up);
            more = hs_server_run(w->srv);
            run_flush(w);
            if (!more)
                break;
        }
    }
    run_flush(w);
    if (f->d.batch_end != NULL)
        f->d.batch_end();
    return NULL;
}

static void worker_wake(struct worker *w)
{
    uint64_t one = 1;
    ssize_t r;

    if (w->stopfd < 0)
        return;
    r = write(w->stopfd, &one, sizeof(one));
    (void)r;
}

static void worker_wake_cb(void *ud)
{
    worker_wake(ud);
}

static int worker_init(struct rt_front *f, struct worker *w, struct sockaddr_in *sa,
                       unsigned conn_limit, unsigned xfers, char *err, size_t errlen)
{
    struct rt_upstream_config ucfg;
    struct hs_config hc;
    struct epoll_event ev;
    char herr[160];

    w->f = f;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    w->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->epfd < 0 || w->stopfd < 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return TG_EIO;
    }
    memset(&ucfg, 0, sizeof(ucfg));
    ucfg.max_transfers = xfers;
    ucfg.max_host_connections = (long)xfers;
    ucfg.max_total_connections = (long)xfers;
    ucfg.embedded = 1;
    ucfg.native = f->d.cfg->upstream_native;
    w->up = rt_upstream_create(&ucfg, err, errlen);
    if (w->up == NULL)
        return TG_ENOMEM;
    w->env.cfg = f->d.cfg;
    w->env.router = f->d.router;
    w->env.metrics = f->d.metrics;
    w->env.mask = f->d.mask;
    w->env.up = w->up;
    w->env.creds = f->d.creds;
    w->env.on_complete = f->d.on_complete;
    w->env.on_complete_ud = f->d.on_complete_ud;
    w->env.hold_after_complete = f->d.batch_flush != NULL;
    w->env.admit = f->d.admit;
    w->env.admit_ud = f->d.admit_ud;
    w->env.in_flight = &f->in_flight;
    w->env.stopping = &f->stopping;
    w->env.quiesced = &f->quiesced;
    memset(&hc, 0, sizeof(hc));
    hc.epfd = w->epfd;
    hc.addr = *sa;
    hc.reuse_port = 1;
    hc.max_connections = conn_limit;
    hc.ipcap = f->ipcap;
    hc.header_timeout_ms = f->d.cfg->header_timeout_ms;
    hc.body_timeout_ms = f->d.cfg->body_timeout_ms;
    hc.body_min_rate = f->d.cfg->body_min_rate;
    hc.keepalive_timeout_ms = f->d.cfg->keepalive_timeout_ms;
    hc.send_timeout_ms = f->d.cfg->send_timeout_ms;
    /* after an early answer (401, 413): enough to let a client finish sending a body of the
     * largest allowed size, so that it reads the answer instead of a reset */
    hc.linger_max_bytes = (size_t)f->d.cfg->max_body_bytes + 64u * 1024u;
    hc.head_max_bytes = RT_FRONT_HEAD_HARD_MAX_BYTES;
    hc.backlog = 1024;
    hc.handler = access_cb;
    hc.handler_cls = w;
    hc.completed = completed_cb;
    hc.completed_cls = w;
    hc.wake = worker_wake_cb;
    hc.wake_cls = w;
    w->srv = hs_server_create(&hc, herr, sizeof(herr));
    if (w->srv == NULL) {
        snprintf(err, errlen, "cannot listen on %s: %s", f->d.cfg->listen, herr);
        return TG_EIO;
    }
    if (sa->sin_port == 0)
        sa->sin_port = htons(hs_server_port(w->srv)); /* the next loops share the port */
    if (w == &f->workers[0] && f->d.cfg->admin_listen[0] != '\0') {
        /* the admin listener: on the first loop only (its traffic is small) */
        if (parse_listen(f->d.cfg->admin_listen, &hc.addr, err, errlen) != 0)
            return TG_EINVAL;
        hc.reuse_port = 0;
        hc.max_connections = RT_FRONT_ADMIN_CONNECTIONS;
        hc.ipcap = NULL;
        hc.handler = admin_access_cb;
        w->admin = hs_server_create(&hc, herr, sizeof(herr));
        if (w->admin == NULL) {
            snprintf(err, errlen, "cannot listen on %s (admin_listen): %s", f->d.cfg->admin_listen,
                     herr);
            return TG_EIO;
        }
        f->admin_port = hs_server_port(w->admin);
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = RT_FRONT_TAG_UPSTREAM;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, rt_upstream_fd(w->up), &ev) != 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return TG_EIO;
    }
    ev.data.u64 = RT_FRONT_TAG_STOP;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->stopfd, &ev) != 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return TG_EIO;
    }
    return 0;
}

uint64_t rt_front_fds_needed(const struct rt_config *cfg)
{
    uint64_t loops = cfg->threads > 0 ? cfg->threads : 1;

    /* client connections (plus one being refused per loop), provider connections (each loop
     * may hold one per upstream slot), and the rest: listening sockets, epoll sets and
     * eventfds, the spool's files, Kafka's broker connections, libcurl's own descriptors */
    return (uint64_t)cfg->max_connections + loops +
           loops * ((uint64_t)cfg->max_in_flight + RT_FRONT_EXTRA_TRANSFERS) +
           (cfg->admin_listen[0] != '\0' ? RT_FRONT_ADMIN_CONNECTIONS + 1u : 0u) +
           RT_FRONT_FDS_RESERVE;
}

struct rt_front *rt_front_start(const struct rt_front_deps *deps, char *err, size_t errlen)
{
    struct rt_front *f = calloc(1, sizeof(*f));
    struct sockaddr_in sa;
    unsigned n;
    unsigned conn_limit;
    unsigned xfers;

    if (f == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->d = *deps;
    if (deps->cfg->master_key[0] != '\0')
        tg_sha256_hex(deps->cfg->master_key, strlen(deps->cfg->master_key), f->master_hash);
    if (parse_listen(deps->cfg->listen, &sa, err, errlen) != 0) {
        free(f);
        return NULL;
    }
    n = deps->cfg->threads > 0 ? deps->cfg->threads : 1;
    f->workers = calloc(n, sizeof(*f->workers));
    if (f->workers == NULL) {
        snprintf(err, errlen, "out of memory");
        free(f);
        return NULL;
    }
    f->nworkers = n;
    if (deps->cfg->max_connections_per_ip < deps->cfg->max_connections) {
        f->ipcap = hs_ipcap_create(deps->cfg->max_connections_per_ip, deps->cfg->max_connections);
        if (f->ipcap == NULL) {
            snprintf(err, errlen, "out of memory");
            free(f->workers);
            free(f);
            return NULL;
        }
    }
    /* the connection cap is split between the loops (the kernel spreads connections over the
     * listening sockets); every loop can take the whole in-flight cap, which is global */
    conn_limit = (unsigned)((deps->cfg->max_connections + n - 1) / n);
    xfers = deps->cfg->max_in_flight + RT_FRONT_EXTRA_TRANSFERS;
    for (unsigned i = 0; i < n; i++) {
        f->workers[i].epfd = -1;
        f->workers[i].stopfd = -1;
        pthread_mutex_init(&f->workers[i].mbox_mu, NULL);
    }
    for (unsigned i = 0; i < n; i++) {
        if (worker_init(f, &f->workers[i], &sa, conn_limit, xfers, err, errlen) != 0)
            goto fail;
    }
    f->port = ntohs(sa.sin_port);
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&f->workers[i].thread, NULL, worker_main, &f->workers[i]) != 0) {
            snprintf(err, errlen, "cannot start the HTTP threads");
            goto fail;
        }
        f->workers[i].started = 1;
    }
    return f;
fail:
    rt_front_stop(&f);
    return NULL;
}

uint16_t rt_front_port(const struct rt_front *f)
{
    return f->port;
}

uint16_t rt_front_admin_port(const struct rt_front *f)
{
    return f->admin_port;
}

void rt_front_quiesce(struct rt_front *f)
{
    /* new connections are refused; keep-alive connections get 503 for new requests */
    atomic_store(&f->quiesced, 1);
    for (unsigned i = 0; i < f->nworkers; i++)
        worker_wake(&f->workers[i]);
}

void rt_front_cancel_upstream(struct rt_front *f)
{
    for (unsigned i = 0; i < f->nworkers; i++) {
        if (f->workers[i].up != NULL)
            rt_upstream_shutdown(f->workers[i].up);
    }
}

int64_t rt_front_in_flight(const struct rt_front *f)
{
    return atomic_load(&((struct rt_front *)f)->in_flight);
}

void rt_front_stop(struct rt_front **fp)
{
    struct rt_front *f;

    if (fp == NULL || *fp == NULL)
        return;
    f = *fp;
    *fp = NULL;
    atomic_store(&f->stopping, 1);
    atomic_store(&f->loops_stop, 1);
    for (unsigned i = 0; i < f->nworkers; i++)
        worker_wake(&f->workers[i]);
    for (unsigned i = 0; i < f->nworkers; i++) {
        if (f->workers[i].started)
            pthread_join(f->workers[i].thread, NULL);
    }
    for (unsigned i = 0; i < f->nworkers; i++) {
        struct worker *w = &f->workers[i];

        /* transfers are finished first (their completions may resume connections), answers
         * left in the mailbox are taken, then every connection is closed, requests in progress
         * completed as ended by the shutdown */
        rt_upstream_destroy(&w->up);
        mailbox_run(w);
        hs_server_destroy(&w->srv);
        hs_server_destroy(&w->admin);
        pthread_mutex_destroy(&w->mbox_mu);
        if (w->epfd >= 0)
            close(w->epfd);
        if (w->stopfd >= 0)
            close(w->stopfd);
    }
    free(f->workers);
    hs_ipcap_destroy(&f->ipcap);
    free(f);
}
