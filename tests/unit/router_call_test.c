/* call: one API request's life through its public entry points, on a real loop — hsrv on a
 * loopback socket, the upstream embedded in the same loop (the built-in HTTP/1.1 client), the
 * router — against a scripted provider on another loopback socket. Every scenario checks what
 * the client gets (status, headers, body), what the provider got (path, headers, body), and the
 * one event the call writes.
 *
 * The loop here plays http_front's part only as far as a call needs it: every request is taken
 * as authenticated with the master key and handed to the call. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "call.h"
#include "config.h"
#include "hsrv.h"
#include "mask.h"
#include "router.h"
#include "rt_metrics.h"
#include "tg_log.h"
#include "tg_time.h"
#include "upstream.h"

#define WAIT_MS 5000
#define SCRIPT_MAX 16
#define SEEN_MAX 16
#define EVENTS_MAX 32

/* ------------------------------------------------------------------ scripted provider */

struct reply {
    int delay_ms;     /* before answering */
    const char *head; /* status line and headers ending with CRLF; NULL: close without one */
    const char *body; /* sent with its Content-Length */
};

struct seen {
    char line[256];  /* request line */
    char head[4096]; /* headers */
    char body[8192];
};

static struct {
    pthread_mutex_t mu;
    int lfd;
    uint16_t port;
    pthread_t thread;
    int stop;
    struct reply script[SCRIPT_MAX];
    int n_script, next;
    struct seen seen[SEEN_MAX];
    int n_seen;
} prov = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* One request from fd into s (head, then Content-Length body). 0, or -1 when the peer closed. */
static int read_request(int fd, struct seen *s)
{
    char buf[16384];
    size_t n = 0;
    char *end = NULL;
    size_t cl = 0, hl;
    const char *p;

    while (end == NULL) {
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);

        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    hl = (size_t)(end + 4 - buf);
    p = strcasestr(buf, "\r\nContent-Length:");
    if (p != NULL && p < end)
        cl = strtoul(p + 17, NULL, 10);
    while (n < hl + cl && n < sizeof(buf) - 1) {
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);

        if (r <= 0)
            return -1;
        n += (size_t)r;
    }
    buf[n] = '\0';
    {
        const char *le = strstr(buf, "\r\n");

        snprintf(s->line, sizeof(s->line), "%.*s", (int)(le - buf), buf);
        snprintf(s->head, sizeof(s->head), "%.*s", (int)(hl - (size_t)(le + 2 - buf)), le + 2);
        snprintf(s->body, sizeof(s->body), "%.*s", (int)cl, buf + hl);
    }
    return 0;
}

static void *provider_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;

    for (;;) {
        struct seen s;
        struct reply r = {0, NULL, NULL};
        char out[16384];
        int n;

        if (read_request(fd, &s) != 0)
            break;
        pthread_mutex_lock(&prov.mu);
        if (prov.n_seen < SEEN_MAX)
            prov.seen[prov.n_seen++] = s;
        if (prov.next < prov.n_script)
            r = prov.script[prov.next++];
        pthread_mutex_unlock(&prov.mu);
        if (r.delay_ms > 0)
            usleep((useconds_t)r.delay_ms * 1000u);
        if (r.head == NULL)
            break;
        n = snprintf(out, sizeof(out), "%sContent-Length: %zu\r\n\r\n%s", r.head, strlen(r.body),
                     r.body);
        if (send(fd, out, (size_t)n, MSG_NOSIGNAL) < 0)
            break;
    }
    close(fd);
    return NULL;
}

static void *provider_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(prov.lfd, NULL, NULL);
        pthread_t t;

        if (fd < 0)
            break;
        if (pthread_create(&t, NULL, provider_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
    return NULL;
}

static void script(int n, ...)
{
    va_list ap;

    va_start(ap, n);
    pthread_mutex_lock(&prov.mu);
    prov.n_script = n;
    prov.next = 0;
    prov.n_seen = 0;
    for (int i = 0; i < n; i++)
        prov.script[i] = va_arg(ap, struct reply);
    pthread_mutex_unlock(&prov.mu);
    va_end(ap);
}

static struct seen seen_at(int i)
{
    struct seen s;

    memset(&s, 0, sizeof(s));
    pthread_mutex_lock(&prov.mu);
    if (i < prov.n_seen)
        s = prov.seen[i];
    pthread_mutex_unlock(&prov.mu);
    return s;
}

static int seen_count(void)
{
    int n;

    pthread_mutex_lock(&prov.mu);
    n = prov.n_seen;
    pthread_mutex_unlock(&prov.mu);
    return n;
}

/* ------------------------------------------------------------------ the loop */

static struct {
    int epfd, evfd;
    struct hs_server *srv;
    struct rt_upstream *up;
    struct rt_config *cfg;
    struct rt_router *router;
    struct rt_metrics *metrics;
    struct rt_mask *mask;
    struct rt_call_env env;
    _Atomic int64_t in_flight;
    _Atomic int stopping, quiesced, stop;
    pthread_t thread;
    uint16_t port;
} L;

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct proto_event events[EVENTS_MAX];
static int n_events;

static void on_complete(const struct proto_event *ev, void *ud)
{
    (void)ud;
    pthread_mutex_lock(&ev_mu);
    if (n_events < EVENTS_MAX)
        events[n_events++] = *ev;
    pthread_mutex_unlock(&ev_mu);
}

static int handler(void *cls, struct hs_conn *conn, const char *url, const char *method,
                   const char *version, const char *upload, size_t *upload_size, void **ctx)
{
    (void)cls;
    (void)method;
    (void)version;
    if (*ctx == NULL) {
        enum rt_api api = strcmp(url, "/v1/messages") == 0     ? RT_API_MESSAGES
                          : strcmp(url, "/v1/embeddings") == 0 ? RT_API_EMBEDDINGS
                                                               : RT_API_CHAT;
        struct rt_call *c = rt_call_create(&L.env, conn, api, url == NULL ? "" : "/v1/x",
                                           api == RT_API_MESSAGES, NULL, NULL);

        if (c == NULL)
            return HS_NO;
        *ctx = c;
        return rt_call_start(c);
    }
    if (upload != NULL)
        return rt_call_body(*ctx, upload, upload_size);
    return rt_call_run(*ctx);
}

static void completed(void *cls, struct hs_conn *conn, void **ctx, enum hs_toe toe)
{
    (void)cls;
    (void)conn;
    if (*ctx != NULL)
        rt_call_completed(*ctx, toe);
    *ctx = NULL;
}

static void wake(void *cls)
{
    uint64_t one = 1;

    (void)cls;
    if (write(L.evfd, &one, sizeof(one)) < 0) {
        /* the loop runs anyway within its timeout */
    }
}

static void *loop_main(void *arg)
{
    struct epoll_event evs[64];

    (void)arg;
    while (!atomic_load(&L.stop)) {
        int t = rt_upstream_timeout_ms(L.up);
        int ht = hs_server_timeout_ms(L.srv);
        int n;

        if (ht >= 0 && (t < 0 || ht < t))
            t = ht;
        if (t < 0 || t > 50)
            t = 50;
        n = epoll_wait(L.epfd, evs, 64, t);
        tg_loop_tick(); /* as router-svc's loop */
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == 1) {
                uint64_t v;

                if (read(L.evfd, &v, sizeof(v)) < 0) {
                    /* drained */
                }
            } else if (evs[i].data.u64 >= HS_TAG_LIMIT) {
                hs_server_event(L.srv, &evs[i]);
            }
        }
        hs_server_housekeep(L.srv);
        for (int k = 0; k < 8; k++) {
            rt_upstream_run(L.up);
            if (!hs_server_run(L.srv))
                break;
        }
    }
    return NULL;
}

#define CFG_FMT                                                                                    \
    "model_list:\n"                                                                                \
    "  - model_name: gpt-main\n"                                                                   \
    "    litellm_params: {model: openai/up-model, api_base: http://127.0.0.1:%u/v1,\n"             \
    "                     api_key: sk-provider-secret-0001, timeout: 1,\n"                         \
    "                     input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}\n"      \
    "    model_info: {id: main-1}\n"                                                               \
    "  - model_name: claude-main\n"                                                                \
    "    litellm_params: {model: anthropic/claude-up, api_base: http://127.0.0.1:%u,\n"            \
    "                     api_key: sk-ant-secret-0002, timeout: 2}\n"                              \
    "    model_info: {id: claude-1}\n"                                                             \
    "router_settings: {num_retries: 2, allowed_fails: 100, cooldown_time: 1}\n"                    \
    "general_settings: {master_key: sk-master-000000000001}\n"                                     \
    "tollgate: {limits: {max_in_flight: 4, max_body_bytes: 4096}}\n"

static int setup(void **state)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    struct rt_config_diag diag;
    char text[2048], err[256];
    struct rt_upstream_config uc;
    struct hs_config hc;
    struct epoll_event ev;
    int one = 1;
    const char *secrets[4];
    size_t ns;

    (void)state;
    tg_log_set_level(TG_LOG_OFF);
    prov.lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(prov.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(prov.lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(prov.lfd, 64) != 0 ||
        getsockname(prov.lfd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    prov.port = ntohs(sa.sin_port);
    pthread_create(&prov.thread, NULL, provider_main, NULL);

    snprintf(text, sizeof(text), CFG_FMT, prov.port, prov.port);
    L.cfg = rt_config_load_buffer("call.yaml", text, strlen(text), &diag);
    if (L.cfg == NULL) {
        fprintf(stderr, "%s\n", diag.error);
        return -1;
    }
    ns = rt_config_secrets(L.cfg, secrets, 4);
    L.mask = rt_mask_create(secrets, ns < 4 ? ns : 4, err, sizeof(err));
    L.router = rt_router_create(L.cfg, L.mask, err, sizeof(err));
    L.metrics = rt_metrics_create(L.cfg);
    if (L.mask == NULL || L.router == NULL || L.metrics == NULL)
        return -1;
    L.epfd = epoll_create1(EPOLL_CLOEXEC);
    L.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    memset(&uc, 0, sizeof(uc));
    uc.max_transfers = 16;
    uc.max_host_connections = 16;
    uc.max_total_connections = 16;
    uc.embedded = 1;
    uc.native = 1;
    L.up = rt_upstream_create(&uc, err, sizeof(err));
    memset(&hc, 0, sizeof(hc));
    hc.epfd = L.epfd;
    hc.addr.sin_family = AF_INET;
    hc.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    hc.max_connections = 64;
    hc.handler = handler;
    hc.completed = completed;
    hc.wake = wake;
    L.srv = hs_server_create(&hc, err, sizeof(err));
    if (L.up == NULL || L.srv == NULL)
        return -1;
    L.port = hs_server_port(L.srv);
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = 1;
    epoll_ctl(L.epfd, EPOLL_CTL_ADD, L.evfd, &ev);
    ev.data.u64 = 2;
    epoll_ctl(L.epfd, EPOLL_CTL_ADD, rt_upstream_fd(L.up), &ev);
    L.env.cfg = L.cfg;
    L.env.router = L.router;
    L.env.metrics = L.metrics;
    L.env.mask = L.mask;
    L.env.up = L.up;
    L.env.on_complete = on_complete;
    L.env.in_flight = &L.in_flight;
    L.env.stopping = &L.stopping;
    L.env.quiesced = &L.quiesced;
    pthread_create(&L.thread, NULL, loop_main, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    atomic_store(&L.stop, 1);
    wake(NULL);
    pthread_join(L.thread, NULL);
    rt_upstream_destroy(&L.up);
    hs_server_destroy(&L.srv);
    shutdown(prov.lfd, SHUT_RDWR);
    close(prov.lfd);
    pthread_join(prov.thread, NULL);
    rt_metrics_destroy(&L.metrics);
    rt_router_destroy(&L.router);
    rt_mask_destroy(&L.mask);
    rt_config_destroy(&L.cfg);
    close(L.epfd);
    close(L.evfd);
    return 0;
}

/* ------------------------------------------------------------------ the client */

struct answer {
    int status;
    char head[4096];
    char body[65536];
    size_t body_len;
};

static int client_open(void)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(L.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Send a POST of body to path with Connection: close and read the answer to EOF. */
static void post(const char *path, const char *body, struct answer *a)
{
    char req[16384];
    char buf[65536 + 4096];
    size_t n = 0;
    int fd = client_open();
    int len = snprintf(req, sizeof(req),
                       "POST %s HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
                       "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                       path, strlen(body), body);
    char *e;

    assert_int_equal(send(fd, req, (size_t)len, MSG_NOSIGNAL), len);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t r;

        assert_true(poll(&p, 1, WAIT_MS) > 0);
        r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    memset(a, 0, sizeof(*a));
    e = strstr(buf, "\r\n\r\n");
    assert_non_null(e);
    a->status = atoi(buf + 9);
    snprintf(a->head, sizeof(a->head), "%.*s", (int)(e + 2 - buf), buf);
    a->body_len = n - (size_t)(e + 4 - buf);
    memcpy(a->body, e + 4, a->body_len);
    a->body[a->body_len] = '\0';
}

/* The value of header name in a (case-insensitive), "" when absent. */
static const char *hdr(const struct answer *a, const char *name, char *out, size_t cap)
{
    char key[96];
    const char *p;

    snprintf(key, sizeof(key), "\r\n%s:", name);
    p = strcasestr(a->head, key);
    out[0] = '\0';
    if (p != NULL) {
        p += strlen(key);
        while (*p == ' ')
            p++;
        snprintf(out, cap, "%.*s", (int)strcspn(p, "\r"), p);
    }
    return out;
}

/* The event of the latest call, waiting for it. */
static struct proto_event last_event(int count_before)
{
    struct proto_event ev;
    uint64_t dl = tg_now_mono_ms() + WAIT_MS;

    memset(&ev, 0, sizeof(ev));
    for (;;) {
        pthread_mutex_lock(&ev_mu);
        if (n_events > count_before) {
            ev = events[n_events - 1];
            pthread_mutex_unlock(&ev_mu);
            return ev;
        }
        pthread_mutex_unlock(&ev_mu);
        assert_true(tg_now_mono_ms() < dl);
        usleep(5000);
    }
}

static int events_now(void)
{
    int n;

    pthread_mutex_lock(&ev_mu);
    n = n_events;
    pthread_mutex_unlock(&ev_mu);
    return n;
}

#define OK_JSON "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
#define CHAT_OK                                                                                    \
    OK_JSON,                                                                                       \
        "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"     \
        "{\"role\":\"assistant\",\"content\":\"hi\"},\"finish_reason\":\"stop\"}],\"usage\":"      \
        "{\"prompt_tokens\":10,\"completion_tokens\":5}}"

/* ------------------------------------------------------------------ scenarios */

/* A served call: the pristine body with only the model swapped (and the gateway's own parameter
 * removed), the provider's headers, the answer relayed, its cost, one event. */
static void test_served(void **state)
{
    struct answer a;
    struct proto_event ev;
    struct seen s;
    char v[128];
    int e0 = events_now();

    (void)state;
    script(1, (struct reply){0, CHAT_OK});
    post("/v1/chat/completions",
         "{\"model\":\"gpt-main\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"disable_fallbacks\":false,\"temperature\":0.5}",
         &a);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"content\":\"hi\""));
    assert_string_equal(hdr(&a, "x-tollgate-attempts", v, sizeof(v)), "1");
    assert_string_equal(hdr(&a, "x-tollgate-model-group", v, sizeof(v)), "gpt-main");
    /* 10 x 1e-6 + 5 x 2e-6 = 2e-5 USD */
    assert_string_equal(hdr(&a, "x-tollgate-response-cost", v, sizeof(v)), "0.000020000");
    s = seen_at(0);
    assert_string_equal(s.line, "POST /v1/chat/completions HTTP/1.1");
    assert_non_null(strcasestr(s.head, "Authorization: Bearer sk-provider-secret-0001"));
    assert_non_null(strstr(s.body, "\"model\":\"up-model\""));
    assert_null(strstr(s.body, "disable_fallbacks"));
    assert_non_null(strstr(s.body, "\"temperature\":0.5"));
    ev = last_event(e0);
    assert_int_equal(ev.status, 200);
    assert_int_equal(ev.prompt_tokens, 10);
    assert_int_equal(ev.completion_tokens, 5);
    assert_int_equal(ev.cost_nusd, 20000);
    assert_int_equal(ev.attempts, 1);
    assert_string_equal(ev.deployment_id, "main-1");
    assert_string_equal(ev.model_requested, "gpt-main");
    assert_int_equal(events_now(), e0 + 1);
}

/* A 503 then a success: two attempts, the trail, one event. Its times: the call's start and
 * end within the wall-clock times around the request, the end the start plus the latency, which
 * holds both answers' delays; the router's overhead (the header) within the call's time less
 * the provider's. */
static void test_retry(void **state)
{
    struct answer a;
    struct proto_event ev;
    char v[64];
    int e0 = events_now();
    int64_t t0, t1;
    double overhead_ms;

    (void)state;
    script(2,
           (struct reply){40, "HTTP/1.1 503 Service Unavailable\r\n",
                          "{\"error\":{\"message\":\"overloaded now\"}}"},
           (struct reply){30, CHAT_OK});
    t0 = (int64_t)tg_now_epoch_ms();
    post("/v1/chat/completions", "{\"model\":\"gpt-main\",\"messages\":[]}", &a);
    t1 = (int64_t)tg_now_epoch_ms();
    assert_int_equal(a.status, 200);
    assert_string_equal(hdr(&a, "x-tollgate-attempts", v, sizeof(v)), "2");
    assert_true(hdr(&a, "x-tollgate-overhead-ms", v, sizeof(v))[0] != '\0');
    overhead_ms = strtod(v, NULL);
    ev = last_event(e0);
    assert_int_equal(ev.status, 200);
    assert_int_equal(ev.attempts, 2);
    assert_int_equal(ev.trail_len, 2);
    assert_string_equal(ev.trail[0].error_class, "server_error");
    assert_int_equal(seen_count(), 2);
    assert_true(ev.ts_start_ms >= t0 && ev.ts_end_ms <= t1);
    assert_int_equal(ev.ts_end_ms - ev.ts_start_ms, ev.latency_ms);
    assert_true(ev.latency_ms >= 70 && ev.latency_ms <= t1 - t0);
    assert_true(overhead_ms >= 0.0 && overhead_ms <= (double)(ev.latency_ms - 70 + 1));
}

/* The router's outcome is the status: a provider's 429 with its retry-after, a 3xx answer
 * (unusable: 502), a timeout (504), an unknown model (400, no attempt). */
static void test_outcome_statuses(void **state)
{
    struct answer a;
    struct proto_event ev;
    char v[64];
    int e0;

    (void)state;
    e0 = events_now();
    script(3, (struct reply){0, "HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\n", "{}"},
           (struct reply){0, "HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\n", "{}"},
           (struct reply){0, "HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\n", "{}"});
    post("/v1/chat/completions", "{\"model\":\"gpt-main\",\"messages\":[]}", &a);
    assert_int_equal(a.status, 429);
    assert_string_equal(hdr(&a, "retry-after", v, sizeof(v)), "7");
    ev = last_event(e0);
    assert_int_equal(ev.status, 429);
    assert_string_equal(ev.error_class, "rate_limit");

    e0 = events_now();
    script(3, (struct reply){0, "HTTP/1.1 302 Found\r\nLocation: /x\r\n", ""},
           (struct reply){0, "HTTP/1.1 302 Found\r\nLocation: /x\r\n", ""},
           (struct reply){0, "HTTP/1.1 302 Found\r\nLocation: /x\r\n", ""});
    post("/v1/chat/completions", "{\"model\":\"gpt-main\",\"messages\":[]}", &a);
    assert_int_equal(a.status, 502);
    assert_string_equal(last_event(e0).error_class, "invalid_response");

    e0 = events_now();
    script(3, (struct reply){1500, CHAT_OK}, (struct reply){1500, CHAT_OK},
           (struct reply){1500, CHAT_OK});
    post("/v1/chat/completions", "{\"model\":\"gpt-main\",\"messages\":[]}", &a);
    assert_int_equal(a.status, 504);
    assert_non_null(strstr(a.body, "\"code\":\"timeout\""));
    assert_string_equal(last_event(e0).error_class, "timeout");

    e0 = events_now();
    script(0);
    post("/v1/chat/completions", "{\"model\":\"no-such-model\",\"messages\":[]}", &a);
    assert_int_equal(a.status, 400);
    assert_non_null(strstr(a.body, "Invalid model name"));
    assert_int_equal(last_event(e0).status, 400);
    assert_int_equal(seen_count(), 0);
}

/* An Anthropic client to an OpenAI deployment: the provider gets chat completions, the client
 * gets a message; an OpenAI client to the Anthropic deployment the other way round; an
 * embeddings request to the Anthropic deployment is a 400 naming it. */
static void test_translation(void **state)
{
    struct answer a;
    struct seen s;
    int e0;

    (void)state;
    script(1, (struct reply){0, CHAT_OK});
    post("/v1/messages",
         "{\"model\":\"gpt-main\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\","
         "\"content\":\"hello\"}]}",
         &a);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"type\":\"message\""));
    s = seen_at(0);
    assert_string_equal(s.line, "POST /v1/chat/completions HTTP/1.1");
    assert_non_null(strstr(s.body, "\"messages\""));

    script(1, (struct reply){0, OK_JSON,
                             "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\","
                             "\"content\":[{\"type\":\"text\",\"text\":\"yo\"}],\"stop_reason\":"
                             "\"end_turn\",\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}"});
    post("/v1/chat/completions",
         "{\"model\":\"claude-main\",\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}]}", &a);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"object\":\"chat.completion\""));
    s = seen_at(0);
    assert_string_equal(s.line, "POST /v1/messages HTTP/1.1");
    assert_non_null(strcasestr(s.head, "x-api-key: sk-ant-secret-0002"));
    assert_non_null(strcasestr(s.head, "anthropic-version: 2023-06-01"));

    e0 = events_now();
    script(0);
    post("/v1/embeddings", "{\"model\":\"claude-main\",\"input\":\"x\"}", &a);
    assert_int_equal(a.status, 400);
    assert_non_null(strstr(a.body, "does not serve"));
    assert_int_equal(last_event(e0).status, 400);
    assert_int_equal(seen_count(), 0);
}

/* A stream relayed event by event; the usage chunk the call asked for itself is not
 * forwarded, its tokens are billed. */
static void test_stream(void **state)
{
    static const char sse[] =
        "data: "
        "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
        "{\"content\":\"A\"}}]}\n\n"
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":"
        "{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n"
        "data: [DONE]\n\n";
    struct answer a;
    struct proto_event ev;
    int e0 = events_now();

    (void)state;
    script(1, (struct reply){0, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n", sse});
    post("/v1/chat/completions", "{\"model\":\"gpt-main\",\"stream\":true,\"messages\":[]}", &a);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"content\":\"A\""));
    assert_non_null(strstr(a.body, "data: [DONE]"));
    assert_null(strstr(a.body, "\"usage\""));
    assert_non_null(strstr(seen_at(0).body, "\"include_usage\":true"));
    ev = last_event(e0);
    assert_int_equal(ev.status, 200);
    assert_int_equal(ev.stream, 1);
    assert_int_equal(ev.prompt_tokens, 4);
    assert_int_equal(ev.completion_tokens, 1);
}

/* Which chunk is the include_usage chunk (dropped, as the call asked for it itself) and what is
 * billed, for the shapes it takes: the scanner reads the common ones, jansson the rest (an
 * exponent in the chunk), with the same answer. */
static void test_stream_usage_chunk_shapes(void **state)
{
    static const struct {
        const char *chunk;
        int dropped;
        int prompt, completion;
    } cases[] = {
        {"{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}", 1, 4, 1},
        {"{\"choices\":[ \t ],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}", 1, 5, 2},
        {"{\"usage\":{\"prompt_tokens\":6,\"completion_tokens\":3}}", 1, 6, 3},
        {"{\"choices\":null,\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4}}", 1, 7, 4},
        {"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"B\"}}],\"usage\":"
         "{\"prompt_tokens\":8,\"completion_tokens\":5}}",
         0, 8, 5},
        {"{\"x\":1e3,\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6}}", 1, 9,
         6},
        {"{\"choices\":[],\"usage\":null}", 0, 0, 0},
        {"{\"choices\":[],\"usage\":{\"prompt_tokens\":1},\"usage\":{\"prompt_tokens\":3,"
         "\"completion_tokens\":2}}",
         1, 3, 2},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char sse[512];
        struct answer a;
        struct proto_event ev;
        int e0 = events_now();

        snprintf(sse, sizeof(sse),
                 "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":"
                 "0,\"delta\":{\"content\":\"A\"}}]}\n\ndata: %s\n\ndata: [DONE]\n\n",
                 cases[i].chunk);
        script(1, (struct reply){0, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n", sse});
        post("/v1/chat/completions", "{\"model\":\"gpt-main\",\"stream\":true,\"messages\":[]}",
             &a);
        assert_int_equal(a.status, 200);
        if ((strstr(a.body, "\"usage\"") == NULL) != cases[i].dropped)
            fail_msg("case %zu: usage chunk %s", i, cases[i].dropped ? "forwarded" : "dropped");
        ev = last_event(e0);
        assert_int_equal(ev.prompt_tokens, cases[i].prompt);
        assert_int_equal(ev.completion_tokens, cases[i].completion);
    }
}

/* A client that leaves while its call waits for the provider: the call ends as 499, its event
 * written, and the provider's transfer is cancelled (its connection closed). */
static void test_client_gone(void **state)
{
    static const char body[] = "{\"model\":\"gpt-main\",\"messages\":[]}";
    char req[512];
    int fd, len;
    struct proto_event ev;
    int e0 = events_now();

    (void)state;
    script(1, (struct reply){800, CHAT_OK});
    fd = client_open();
    len = snprintf(req, sizeof(req),
                   "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %zu\r\n\r\n%s",
                   strlen(body), body);
    assert_int_equal(send(fd, req, (size_t)len, MSG_NOSIGNAL), len);
    usleep(200000);
    close(fd);
    ev = last_event(e0);
    assert_int_equal(ev.status, 499);
    assert_string_equal(ev.error_class, "client_closed");
    assert_int_equal(atomic_load(&L.in_flight), 0);
}

/* A body over max_body_bytes is a 413 before it is read; max_in_flight holds. */
static void test_limits(void **state)
{
    char big[6000];
    struct answer a;

    (void)state;
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    big[0] = '{';
    post("/v1/chat/completions", big, &a);
    assert_int_equal(a.status, 413);
    assert_non_null(strstr(a.body, "limit is 4096 bytes"));
    assert_int_equal(atomic_load(&L.in_flight), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_served),           cmocka_unit_test(test_retry),
        cmocka_unit_test(test_outcome_statuses), cmocka_unit_test(test_translation),
        cmocka_unit_test(test_stream),           cmocka_unit_test(test_stream_usage_chunk_shapes),
        cmocka_unit_test(test_client_gone),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
