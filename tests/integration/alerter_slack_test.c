/* alerter integration tests against fake-llm's fake Slack webhook (started here on a free
 * loopback port, stopped by PID).
 *
 *   flood          10,000 failure events in 10 s -> at most elapsed_s x rate + burst messages,
 *                  each within the text and payload caps; suppressed alerts counted and the
 *                  count reported in a later message
 *   retry_after    webhook answers 429 with Retry-After: 5 -> nothing arrives before 5 s
 *   capped_event   an event with every field at its cap gives a message within the same fixed
 *                  bound as a tiny one
 *   dependency     postgres down for 60 s (monotonic time passed in) under load, then up ->
 *                  exactly one degraded and one recovery message
 *   secrets        the webhook URL and keys never appear in messages or in the captured logs
 *   regression_alert_per_request_in_outage
 *                  10,000 requests with capped fields during a Redis outage -> one degraded
 *                  message, no memory growth (the defect this module answers)
 *   daily_report   totals and rows per dimension, rows beyond the maximum ignored
 *   server_errors  5xx retried with backoff until delivered; after max_tries given up, counted
 *   shutdown       destroy() returns within shutdown_wait_ms however blocked the webhook is,
 *                  and aborts a POST hanging on a webhook that never answers
 *
 * argv[1]: the fake-llm binary. Our own stderr is captured to a file while alerters run, so
 * the log scanner sees every line the alerter wrote. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alerter.h"
#include "proto_event.h"
#include "tg_limits.h"
#include "tg_time.h"

#define FLOOD_EVENTS 10000
#define FLOOD_SECONDS 10
#define FLOOD_DEPLOYMENTS 40
#define HOOK_PATH "/slack/T0SECRET/B0SECRET/xoxSECRETTOKEN123"
#define PROVIDER_KEY "sk-live-abcdef0123456789"

static const char *fake_bin;
static char state_dir[256];
static char fake_url[64];
static char hook_url[256];
static pid_t fake_pid = -1;
static char capture_path[512];
static int capture_fd = -1;
static int saved_stderr = -1;

/* ---- fake-llm process ------------------------------------------------------------------- */

static int fake_start(void)
{
    char port_file[512], log_file[512];
    unsigned port = 0;

    snprintf(port_file, sizeof(port_file), "%s/fake.port", state_dir);
    snprintf(log_file, sizeof(log_file), "%s/fake.log", state_dir);
    fake_pid = fork();
    if (fake_pid < 0)
        return -1;
    if (fake_pid == 0) {
        int fd = open(log_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(fake_bin, "fake-llm", "--listen", "127.0.0.1:0", "--port-file", port_file,
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100 && port == 0; i++) {
        FILE *f = fopen(port_file, "r");

        if (f != NULL) {
            if (fscanf(f, "%u", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port == 0)
            tg_sleep_ms(50);
    }
    if (port == 0)
        return -1;
    snprintf(fake_url, sizeof(fake_url), "http://127.0.0.1:%u", port);
    snprintf(hook_url, sizeof(hook_url), "%s%s", fake_url, HOOK_PATH);
    return 0;
}

static void fake_stop(void)
{
    int status;

    if (fake_pid <= 0)
        return;
    kill(fake_pid, SIGTERM);
    for (int i = 0; i < 60; i++) {
        if (waitpid(fake_pid, &status, WNOHANG) == fake_pid) {
            fake_pid = -1;
            return;
        }
        tg_sleep_ms(50);
    }
    kill(fake_pid, SIGKILL);
    waitpid(fake_pid, &status, 0);
    fake_pid = -1;
}

/* ---- HTTP to the fake -------------------------------------------------------------------- */

struct resp {
    char *data;
    size_t len;
};

static size_t on_data(char *p, size_t s, size_t n, void *ud)
{
    struct resp *r = ud;
    char *nd = realloc(r->data, r->len + s * n + 1);

    if (nd == NULL)
        return 0;
    r->data = nd;
    memcpy(r->data + r->len, p, s * n);
    r->len += s * n;
    r->data[r->len] = '\0';
    return s * n;
}

/* Returns the HTTP status; *out (optional) receives the parsed JSON body. */
static long http(const char *method, const char *path, const char *body, json_t **out)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    struct resp r = {NULL, 0};
    char url[512];
    long status = 0;

    assert_non_null(h);
    snprintf(url, sizeof(url), "%s%s", fake_url, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    if (body != NULL) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (out != NULL)
        *out = r.data != NULL ? json_loads(r.data, 0, NULL) : NULL;
    free(r.data);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return status;
}

static void slack_reset(void)
{
    assert_int_equal(http("POST", "/_slack/reset", "{}", NULL), 200);
    assert_int_equal(http("POST", "/_control/slack", "{\"mode\":\"ok\",\"retry_after\":0}", NULL),
                     200);
}

/* The recorded messages (new reference), or fails. */
static json_t *slack_messages(void)
{
    json_t *root = NULL;
    json_t *msgs;

    assert_int_equal(http("GET", "/_slack", NULL, &root), 200);
    assert_non_null(root);
    msgs = json_object_get(root, "messages");
    assert_true(json_is_array(msgs));
    json_incref(msgs);
    json_decref(root);
    return msgs;
}

static size_t slack_wait(size_t want, uint64_t max_ms)
{
    uint64_t end = tg_now_mono_ms() + max_ms;
    size_t n = 0;

    while (tg_now_mono_ms() < end) {
        json_t *m = slack_messages();

        n = json_array_size(m);
        json_decref(m);
        if (n >= want)
            break;
        tg_sleep_ms(100);
    }
    return n;
}

static const char *const secret_needles[] = {HOOK_PATH,           "T0SECRET",   "B0SECRET",
                                             "xoxSECRETTOKEN123", PROVIDER_KEY, "abcdef0123456789"};

static void assert_clean(const char *where, const char *text)
{
    for (size_t i = 0; i < sizeof(secret_needles) / sizeof(secret_needles[0]); i++) {
        if (strstr(text, secret_needles[i]) != NULL)
            fail_msg("%s contains secret \"%s\"", where, secret_needles[i]);
    }
    if (strstr(text, hook_url) != NULL)
        fail_msg("%s contains the webhook URL", where);
}

/* Check one recorded message against every Slack and Tollgate bound; returns the summed section
 * text length. */
static size_t check_message(json_t *m)
{
    const char *body = json_string_value(json_object_get(m, "body"));
    json_int_t size = json_integer_value(json_object_get(m, "size"));
    json_error_t jerr;
    json_t *root, *blocks, *b;
    size_t total = 0, i;

    assert_non_null(body);
    assert_true(size > 0 && size <= TG_ALERT_PAYLOAD_MAX_BYTES);
    assert_int_equal((size_t)size, strlen(body));
    assert_clean("a Slack message", body);
    root = json_loads(body, 0, &jerr);
    if (root == NULL)
        fail_msg("message is not JSON: %s", jerr.text);
    assert_true(json_string_length(json_object_get(root, "text")) <= TG_ALERT_TEXT_MAX_BYTES);
    blocks = json_object_get(root, "blocks");
    assert_true(json_is_array(blocks));
    assert_true(json_array_size(blocks) >= 1 && json_array_size(blocks) <= 50);
    json_array_foreach(blocks, i, b)
    {
        size_t l = json_string_length(json_object_get(json_object_get(b, "text"), "text"));

        assert_true(l > 0 && l <= 3000);
        total += l;
    }
    assert_true(total <= TG_ALERT_TEXT_MAX_BYTES);
    json_decref(root);
    return total;
}

/* ---- stderr capture ---------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    slack_reset();
    fflush(stderr);
    capture_fd = open(capture_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (capture_fd < 0)
        return -1;
    saved_stderr = dup(2);
    dup2(capture_fd, 2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    close(capture_fd);
    /* A POST aborted at shutdown may still be in the fake's hands: let it land before the next
     * test resets the record. */
    tg_sleep_ms(200);
    return 0;
}

static struct sp_alerter *make(struct sp_alerter_config *c)
{
    char err[256];
    struct sp_alerter *al = sp_alerter_create(c, err, sizeof(err));

    if (al == NULL)
        fail_msg("create: %s", err);
    return al;
}

static void base_config(struct sp_alerter_config *c)
{
    sp_alerter_config_defaults(c);
    snprintf(c->default_webhook_url, sizeof(c->default_webhook_url), "%s", hook_url);
}

static void failure_event(struct proto_event *ev, const char *dep, int32_t status)
{
    proto_event_init(ev);
    ev->kind = PROTO_KIND_REQUEST;
    proto_str_set(ev->deployment_id, sizeof(ev->deployment_id), dep);
    proto_str_set(ev->model_group, sizeof(ev->model_group), "gpt-main");
    ev->status = status;
    ev->latency_ms = 20;
    ev->trail_len = 1;
    proto_str_set(ev->trail[0].deployment_id, sizeof(ev->trail[0].deployment_id), dep);
    proto_str_set(ev->trail[0].group, sizeof(ev->trail[0].group), "gpt-main");
    ev->trail[0].http_status = status;
    proto_str_set(ev->trail[0].error_class, sizeof(ev->trail[0].error_class), "server_error");
    proto_str_set(ev->trail[0].message, sizeof(ev->trail[0].message),
                  "upstream answered 503 service unavailable");
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_flood(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alerter_stats st;
    struct proto_event ev;
    uint64_t t_start, t_end, observe_ns = 0, accounted;
    json_t *msgs, *m;
    size_t n, i, with_count = 0, max_text = 0;
    const int t = SP_ALERT_DEPLOYMENT_FAILURES;

    (void)state;
    base_config(&c);
    c.rate_per_second = 1;
    c.burst = 3;
    c.dedupe_window_s = 3;
    c.failure_window_s = 1;
    c.failure_count = 5;
    c.queue_capacity = 16;
    c.shutdown_wait_ms = 0;
    t_start = tg_now_mono_ms();
    al = make(&c);
    for (int k = 0; k < FLOOD_EVENTS; k++) {
        char dep[32];
        uint64_t due = t_start + (uint64_t)k * FLOOD_SECONDS * 1000u / FLOOD_EVENTS;
        uint64_t t0;

        if (k % 50 == 0) {
            uint64_t now = tg_now_mono_ms();

            if (now < due)
                tg_sleep_ms(due - now);
        }
        snprintf(dep, sizeof(dep), "flood-%02d", k % FLOOD_DEPLOYMENTS);
        failure_event(&ev, dep, 503);
        t0 = tg_now_mono_ns();
        sp_alerter_observe_event(al, &ev);
        observe_ns += tg_now_mono_ns() - t0;
    }
    sp_alerter_get_stats(al, &st);
    sp_alerter_destroy(&al);
    t_end = tg_now_mono_ms();

    msgs = slack_messages();
    n = json_array_size(msgs);
    json_array_foreach(msgs, i, m)
    {
        size_t tl = check_message(m);
        const char *body = json_string_value(json_object_get(m, "body"));

        if (tl > max_text)
            max_text = tl;
        if (strstr(body, "similar alerts suppressed") != NULL ||
            strstr(body, "similar alert suppressed") != NULL)
            with_count++;
    }
    printf("flood: %d events in %.1f s, observe %.2f us/event, raised=%llu suppressed=%llu "
           "dropped=%llu sent=%llu failed=%llu posts=%llu messages=%zu (bound %llu) "
           "with_suppressed_count=%zu max_text=%zu\n",
           FLOOD_EVENTS, (double)(t_end - t_start) / 1000.0,
           (double)observe_ns / 1000.0 / FLOOD_EVENTS,
           (unsigned long long)st.alerts[t][SP_ALERT_RAISED],
           (unsigned long long)st.alerts[t][SP_ALERT_SUPPRESSED],
           (unsigned long long)st.alerts[t][SP_ALERT_DROPPED],
           (unsigned long long)st.alerts[t][SP_ALERT_SENT],
           (unsigned long long)st.alerts[t][SP_ALERT_FAILED], (unsigned long long)st.posts, n,
           (unsigned long long)((t_end - t_start) / 1000u * 1u + 3u), with_count, max_text);
    /* At most elapsed x rate + burst messages, and the bucket was actually exercised. */
    assert_true(n <= (t_end - t_start) / 1000u * 1u + 3u);
    assert_true(n >= FLOOD_SECONDS - 2);
    assert_true(st.posts <= (t_end - t_start) / 1000u * 1u + 3u);
    /* Every raised alert is accounted for: suppressed, dropped, sent, failed, or still queued
     * or in flight at the snapshot (the snapshot is not atomic across counters while the
     * sender runs: one POST may finish and the next start between two reads, hence + 2). */
    accounted = st.alerts[t][SP_ALERT_SUPPRESSED] + st.alerts[t][SP_ALERT_DROPPED] +
                st.alerts[t][SP_ALERT_SENT] + st.alerts[t][SP_ALERT_FAILED];
    assert_true(st.alerts[t][SP_ALERT_RAISED] >= accounted);
    assert_true(st.alerts[t][SP_ALERT_RAISED] - accounted <= st.queue_depth + 2);
    assert_true(st.alerts[t][SP_ALERT_RAISED] >= 100);
    assert_true(st.alerts[t][SP_ALERT_SUPPRESSED] > 0);
    assert_true(st.alerts[t][SP_ALERT_DROPPED] > 0);
    /* The suppressed count reaches Slack in the messages after a window. */
    assert_true(with_count > 0);
    json_decref(msgs);
}

static void test_retry_after(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alerter_stats st;
    struct sp_alert a;
    uint64_t t0;
    json_t *msgs, *m;
    size_t n, i;

    (void)state;
    assert_int_equal(
        http("POST", "/_control/slack", "{\"mode\":\"429\",\"retry_after\":5,\"times\":1}", NULL),
        200);
    base_config(&c);
    c.shutdown_wait_ms = 0;
    al = make(&c);
    t0 = tg_now_epoch_ms();
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_WARNING, "key alias-a reached 80% of budget",
                  "first");
    sp_alerter_raise(al, &a);
    tg_sleep_ms(1000);
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_WARNING, "key alias-b reached 80% of budget",
                  "second");
    sp_alerter_raise(al, &a);
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_WARNING, "key alias-c reached 80% of budget",
                  "third");
    sp_alerter_raise(al, &a);
    n = slack_wait(3, 15000);
    sp_alerter_get_stats(al, &st);
    sp_alerter_destroy(&al);

    msgs = slack_messages();
    printf("retry_after: messages=%zu http_429=%llu retries=%llu\n", json_array_size(msgs),
           (unsigned long long)st.http_429, (unsigned long long)st.retries);
    assert_int_equal(n, 3);
    assert_int_equal(st.http_429, 1);
    json_array_foreach(msgs, i, m)
    {
        json_int_t ts = json_integer_value(json_object_get(m, "ts_ms"));

        check_message(m);
        printf("  message %zu at +%lld ms\n", i, (long long)(ts - (json_int_t)t0));
        assert_true(ts >= (json_int_t)(t0 + 5000));
    }
    /* The alert refused with 429 was delivered, first. */
    assert_non_null(
        strstr(json_string_value(json_object_get(json_array_get(msgs, 0), "body")), "alias-a"));
    json_decref(msgs);
}

static void cap_fill(char *dst, size_t cap, const char *unit)
{
    size_t ul = strlen(unit), n = 0;

    while (n + ul < cap) {
        memcpy(dst + n, unit, ul);
        n += ul;
    }
    dst[n] = '\0';
}

static void test_capped_event(void **state)
{
    static const char adversarial[] = "\"\\<&>\xe2\x82\xac\x01\n";
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct proto_event big, tiny;
    json_t *msgs;
    size_t n, big_size = 0, tiny_size = 0;

    (void)state;
    base_config(&c);
    al = make(&c);

    proto_event_init(&big);
    big.kind = PROTO_KIND_COOLDOWN;
    cap_fill(big.deployment_id, sizeof(big.deployment_id), adversarial);
    cap_fill(big.model_group, sizeof(big.model_group), adversarial);
    cap_fill(big.model_requested, sizeof(big.model_requested), adversarial);
    cap_fill(big.error_class, sizeof(big.error_class), adversarial);
    cap_fill(big.key_alias, sizeof(big.key_alias), adversarial);
    cap_fill(big.team_id, sizeof(big.team_id), adversarial);
    big.status = 503;
    big.trail_len = PROTO_TRAIL_MAX;
    for (int i = 0; i < PROTO_TRAIL_MAX; i++) {
        cap_fill(big.trail[i].deployment_id, sizeof(big.trail[i].deployment_id), adversarial);
        cap_fill(big.trail[i].group, sizeof(big.trail[i].group), adversarial);
        cap_fill(big.trail[i].message, sizeof(big.trail[i].message), adversarial);
        cap_fill(big.trail[i].error_class, sizeof(big.trail[i].error_class), adversarial);
    }
    big.tags_len = PROTO_TAGS_MAX;
    for (int i = 0; i < PROTO_TAGS_MAX; i++)
        cap_fill(big.tags[i], sizeof(big.tags[i]), adversarial);

    proto_event_init(&tiny);
    tiny.kind = PROTO_KIND_COOLDOWN;
    proto_str_set(tiny.deployment_id, sizeof(tiny.deployment_id), "d");
    proto_str_set(tiny.model_group, sizeof(tiny.model_group), "g");
    tiny.status = 503;

    sp_alerter_observe_event(al, &tiny);
    sp_alerter_observe_event(al, &big);
    n = slack_wait(2, 10000);
    sp_alerter_destroy(&al);
    assert_int_equal(n, 2);
    msgs = slack_messages();
    for (size_t i = 0; i < 2; i++) {
        json_t *m = json_array_get(msgs, i);
        size_t size = (size_t)json_integer_value(json_object_get(m, "size"));
        const char *body = json_string_value(json_object_get(m, "body"));

        check_message(m);
        if (strstr(body, "deployment d cooled down") != NULL)
            tiny_size = size;
        else
            big_size = size;
    }
    printf("capped_event: tiny payload %zu bytes, capped payload %zu bytes, bound %d; alert "
           "value %zu bytes for both\n",
           tiny_size, big_size, TG_ALERT_PAYLOAD_MAX_BYTES, sizeof(struct sp_alert));
    assert_true(tiny_size > 0);
    assert_true(big_size > 0);
    /* Both within the one fixed bound that does not depend on the input. */
    assert_true(big_size <= TG_ALERT_PAYLOAD_MAX_BYTES);
    assert_true(tiny_size <= TG_ALERT_PAYLOAD_MAX_BYTES);
    json_decref(msgs);
}

static void test_dependency_outage(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct proto_event ev;
    uint64_t base;
    json_t *msgs, *m;
    size_t i, degraded = 0, recovered = 0, n;

    (void)state;
    base_config(&c);
    c.reminder_interval_s = 3600; /* longer than the outage */
    al = make(&c);
    failure_event(&ev, "dep-ok", 200);
    proto_str_set(ev.trail[0].error_class, sizeof(ev.trail[0].error_class), "");
    base = tg_now_mono_ms();
    /* 60 s of outage in 100 ms steps, reported on every batch, with events flowing. */
    for (int k = 0; k <= 600; k++) {
        assert_int_equal(sp_alerter_dependency_state(al, "postgres", 0, base + (uint64_t)k * 100u),
                         0);
        sp_alerter_dependency_state(al, "redis", 1, base + (uint64_t)k * 100u);
        for (int e = 0; e < 20; e++)
            sp_alerter_observe_event(al, &ev);
    }
    for (int k = 1; k <= 100; k++)
        sp_alerter_dependency_state(al, "postgres", 1, base + 60000u + (uint64_t)k * 100u);
    n = slack_wait(2, 8000);
    tg_sleep_ms(1500); /* anything extra would arrive within the burst */
    sp_alerter_destroy(&al);
    msgs = slack_messages();
    json_array_foreach(msgs, i, m)
    {
        const char *body = json_string_value(json_object_get(m, "body"));

        check_message(m);
        if (strstr(body, "postgres unreachable") != NULL)
            degraded++;
        if (strstr(body, "postgres recovered after 60 s") != NULL)
            recovered++;
    }
    printf("dependency: messages=%zu degraded=%zu recovered=%zu\n", json_array_size(msgs), degraded,
           recovered);
    assert_true(n >= 2);
    assert_int_equal(json_array_size(msgs), 2);
    assert_int_equal(degraded, 1);
    assert_int_equal(recovered, 1);
    json_decref(msgs);
}

static void test_secrets(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alert a;
    struct proto_event ev;
    json_t *msgs, *m;
    size_t i, n;
    char buf[512];

    (void)state;
    base_config(&c);
    /* Per-type webhook too: both must stay out of logs. */
    snprintf(c.type_webhook_url[SP_ALERT_BUDGET], sizeof(c.type_webhook_url[0]), "%s/budget",
             hook_url);
    al = make(&c);
    /* Careless callers: secrets in every string the API lets through. */
    snprintf(buf, sizeof(buf), "posting to %s failed", hook_url);
    sp_alert_init(&a, SP_ALERT_SLOW_REQUESTS, SP_ALERT_WARNING,
                  "model group with key " PROVIDER_KEY, buf);
    sp_alert_add_field(&a, "authorization", "Bearer " PROVIDER_KEY);
    sp_alert_add_field(&a, "webhook", hook_url);
    sp_alert_add_field(&a, "path", HOOK_PATH);
    sp_alerter_raise(al, &a);
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_INFO, "budget", "api_key=" PROVIDER_KEY);
    sp_alerter_raise(al, &a);
    /* An event whose trail message carries a key (the router masks; we mask again). */
    failure_event(&ev, "dep-leak", 401);
    ev.kind = PROTO_KIND_COOLDOWN;
    proto_str_set(ev.trail[0].message, sizeof(ev.trail[0].message),
                  "Incorrect API key provided: " PROVIDER_KEY);
    sp_alerter_observe_event(al, &ev);
    n = slack_wait(3, 10000);
    sp_alerter_destroy(&al);
    assert_int_equal(n, 3);
    msgs = slack_messages();
    json_array_foreach(msgs, i, m)
    {
        const char *path = json_string_value(json_object_get(m, "path"));
        const char *body = json_string_value(json_object_get(m, "body"));

        check_message(m); /* includes the secret scan of the body */
        /* Per-type routing: budget to its own webhook, the rest to the default. */
        if (strstr(body, "] budget*") != NULL)
            assert_string_equal(path, HOOK_PATH "/budget");
        else
            assert_string_equal(path, HOOK_PATH);
    }
    json_decref(msgs);
}

/* The daily report: totals, rows per dimension, within the caps whatever the rows hold. */
static void test_daily_report(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_report_row rows[SP_ALERTER_REPORT_ROWS_MAX + 3];
    char day[11];
    json_t *msgs;
    const char *body;

    (void)state;
    base_config(&c);
    c.daily_report_hour = 0;
    al = make(&c);
    assert_int_equal(sp_alerter_daily_report_due(al, tg_now_epoch_ms(), day), 1);
    assert_int_equal(sp_alerter_daily_report_due(al, tg_now_epoch_ms(), day), 0);
    memset(rows, 0, sizeof(rows));
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        static const char *const dims[] = {"key", "team", "model"};

        snprintf(rows[i].dimension, sizeof(rows[i].dimension), "%s", dims[i % 3]);
        snprintf(rows[i].name, sizeof(rows[i].name), "%s-%zu", dims[i % 3], i);
        rows[i].cost_nusd = (int64_t)(i + 1) * 1000000000;
        rows[i].requests = (int64_t)(i + 1) * 10;
    }
    /* One name as long as the row allows, full of characters that need escaping. */
    memset(rows[0].name, '"', sizeof(rows[0].name) - 1);
    sp_alerter_daily_report(al, day, 171000000000, 1710, rows, sizeof(rows) / sizeof(rows[0]));
    assert_int_equal(slack_wait(1, 5000), 1);
    sp_alerter_destroy(&al);
    msgs = slack_messages();
    check_message(json_array_get(msgs, 0));
    body = json_string_value(json_object_get(json_array_get(msgs, 0), "body"));
    printf("daily_report: %zu bytes\n", strlen(body));
    assert_non_null(strstr(body, "daily spend report "));
    assert_non_null(strstr(body, day));
    assert_non_null(strstr(body, "$171.0000 over 1710 requests"));
    assert_non_null(strstr(body, "top keys"));
    assert_non_null(strstr(body, "top teams"));
    assert_non_null(strstr(body, "top models"));
    assert_non_null(strstr(body, "team-1 $2.0000 (20 req)"));
    /* Rows beyond SP_ALERTER_REPORT_ROWS_MAX are not used. */
    assert_null(strstr(body, "model-17"));
    json_decref(msgs);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

/* The defect this module answers: during a Redis outage an error handler pasted the whole
 * request metadata into an alert on every request, and the string reached gigabytes. Here every
 * one of 10,000 requests during the outage reports Redis down and feeds an event whose every
 * field is at its cap (and each a different deployment): one degraded message, no growth. */
static void test_regression_alert_per_request_in_outage(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alerter_stats st;
    struct proto_event ev;
    long rss_before, rss_after;
    json_t *msgs, *m;
    size_t i, degraded = 0;
    uint64_t t0, t_create, t_end;

    (void)state;
    base_config(&c);
    c.shutdown_wait_ms = 0;
    c.failure_count = 1; /* every request raises a deployment alert of its own */
    t_create = tg_now_mono_ms();
    al = make(&c);
    proto_event_init(&ev);
    ev.kind = PROTO_KIND_REQUEST;
    ev.status = 503;
    ev.latency_ms = 120000;
    cap_fill(ev.model_group, sizeof(ev.model_group), "\"<&\xe2\x82\xac");
    cap_fill(ev.key_alias, sizeof(ev.key_alias), "m");
    cap_fill(ev.error_class, sizeof(ev.error_class), "e");
    ev.trail_len = PROTO_TRAIL_MAX;
    for (int k = 0; k < PROTO_TRAIL_MAX; k++) {
        cap_fill(ev.trail[k].group, sizeof(ev.trail[k].group), "g");
        cap_fill(ev.trail[k].message, sizeof(ev.trail[k].message), "\\\"x");
        cap_fill(ev.trail[k].error_class, sizeof(ev.trail[k].error_class), "server_error");
        ev.trail[k].http_status = 503;
    }
    rss_before = rss_kb();
    t0 = tg_now_mono_ms();
    for (int r = 0; r < FLOOD_EVENTS; r++) {
        cap_fill(ev.deployment_id, sizeof(ev.deployment_id), "d");
        snprintf(ev.deployment_id, 16, "d%06d", r);
        ev.deployment_id[7] = 'd';
        for (int k = 0; k < PROTO_TRAIL_MAX; k++)
            memcpy(ev.trail[k].deployment_id, ev.deployment_id, sizeof(ev.deployment_id));
        sp_alerter_dependency_state(al, "redis", 0, t0 + (uint64_t)r);
        sp_alerter_observe_event(al, &ev);
    }
    rss_after = rss_kb();
    sp_alerter_dependency_state(al, "redis", 0, t0 + FLOOD_EVENTS);
    slack_wait(4, 5000);
    sp_alerter_get_stats(al, &st);
    sp_alerter_destroy(&al);
    t_end = tg_now_mono_ms();
    msgs = slack_messages();
    json_array_foreach(msgs, i, m)
    {
        check_message(m);
        if (strstr(json_string_value(json_object_get(m, "body")), "redis unreachable") != NULL)
            degraded++;
    }
    printf("regression: %d requests in an outage, rss %ld -> %ld kB, raised=%llu, "
           "messages=%zu, degraded=%zu\n",
           FLOOD_EVENTS, rss_before, rss_after,
           (unsigned long long)(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_RAISED] +
                                st.alerts[SP_ALERT_SPEND_TRACKING_DEGRADED][SP_ALERT_RAISED]),
           json_array_size(msgs), degraded);
    assert_int_equal(degraded, 1);
    assert_int_equal(st.alerts[SP_ALERT_SPEND_TRACKING_DEGRADED][SP_ALERT_RAISED], 1);
    /* Every alert lives in storage fixed at create(): nothing grows with the requests. */
    assert_true(rss_before > 0 && rss_after > 0);
    assert_true(rss_after - rss_before < 8 * 1024);
    /* One alert per deployment until the detector table is full; then deployments are not
     * tracked, counted (4 trail attempts per request). */
    assert_int_equal(st.alerts[SP_ALERT_DEPLOYMENT_FAILURES][SP_ALERT_RAISED],
                     c.deployments_capacity);
    assert_int_equal(st.deployments_full,
                     (uint64_t)(FLOOD_EVENTS - c.deployments_capacity) * PROTO_TRAIL_MAX);
    assert_true(json_array_size(msgs) <= (t_end - t_create) / 1000u + 3u);
    json_decref(msgs);
}

/* 5xx: retried with backoff until it works; with max_tries reached: given up, counted. */
static void test_server_errors(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alerter_stats st;
    struct sp_alert a;
    size_t n;
    uint64_t t0;

    (void)state;
    assert_int_equal(http("POST", "/_control/slack", "{\"mode\":\"500\",\"times\":2}", NULL), 200);
    base_config(&c);
    c.retry_base_ms = 200;
    c.max_tries = 5;
    c.shutdown_wait_ms = 0;
    al = make(&c);
    t0 = tg_now_mono_ms();
    sp_alert_init(&a, SP_ALERT_CONSUMER_LAG, SP_ALERT_WARNING, "consumer lag above threshold",
                  "retried");
    sp_alerter_raise(al, &a);
    n = slack_wait(1, 10000);
    /* The fake records the message before the sender has read the answer: wait for that too. */
    for (int i = 0; i < 50; i++) {
        sp_alerter_get_stats(al, &st);
        if (st.alerts[SP_ALERT_CONSUMER_LAG][SP_ALERT_SENT] > 0)
            break;
        tg_sleep_ms(20);
    }
    sp_alerter_destroy(&al);
    printf("server_errors: delivered after %llu ms, posts=%llu retries=%llu\n",
           (unsigned long long)(tg_now_mono_ms() - t0), (unsigned long long)st.posts,
           (unsigned long long)st.retries);
    assert_int_equal(n, 1);
    assert_int_equal(st.posts, 3);
    assert_int_equal(st.retries, 2);
    assert_int_equal(st.alerts[SP_ALERT_CONSUMER_LAG][SP_ALERT_SENT], 1);
    assert_int_equal(st.alerts[SP_ALERT_CONSUMER_LAG][SP_ALERT_FAILED], 0);

    /* Always 500, two tries allowed: one alert given up after exactly two POSTs. */
    assert_int_equal(http("POST", "/_control/slack", "{\"mode\":\"500\",\"times\":0}", NULL), 200);
    c.max_tries = 2;
    al = make(&c);
    sp_alerter_raise(al, &a);
    for (int i = 0; i < 50; i++) {
        sp_alerter_get_stats(al, &st);
        if (st.alerts[SP_ALERT_CONSUMER_LAG][SP_ALERT_FAILED] > 0)
            break;
        tg_sleep_ms(100);
    }
    sp_alerter_destroy(&al);
    assert_int_equal(st.posts, 2);
    assert_int_equal(st.alerts[SP_ALERT_CONSUMER_LAG][SP_ALERT_FAILED], 1);
    assert_int_equal(st.alerts[SP_ALERT_CONSUMER_LAG][SP_ALERT_SENT], 0);
    assert_int_equal(slack_wait(2, 300), 1); /* only the first part's message */
}

/* destroy() waits at most shutdown_wait_ms (plus a little), however blocked the webhook. */
static void test_shutdown_bounded(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alert a;
    uint64_t t0, took;

    (void)state;
    assert_int_equal(http("POST", "/_control/slack", "{\"mode\":\"429\",\"retry_after\":60}", NULL),
                     200);
    base_config(&c);
    c.shutdown_wait_ms = 500;
    al = make(&c);
    for (int i = 0; i < 50; i++) {
        char subject[64];

        snprintf(subject, sizeof(subject), "model group g%d slow", i);
        sp_alert_init(&a, SP_ALERT_SLOW_REQUESTS, SP_ALERT_WARNING, subject, "x");
        sp_alerter_raise(al, &a);
    }
    tg_sleep_ms(300);
    t0 = tg_now_mono_ms();
    sp_alerter_destroy(&al);
    took = tg_now_mono_ms() - t0;
    printf("shutdown: destroy took %llu ms with 50 alerts queued behind a 60 s Retry-After\n",
           (unsigned long long)took);
    assert_true(took <= 500 + 400);
    assert_int_equal(slack_wait(1, 200), 0);
}

/* A webhook that accepts the connection and never answers: destroy() aborts the POST in
 * flight at the shutdown deadline instead of waiting for the 5 s transfer timeout. */
static void test_shutdown_hanging_webhook(void **state)
{
    struct sp_alerter_config c;
    struct sp_alerter *al;
    struct sp_alerter_stats st;
    struct sp_alert a;
    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    uint64_t t0, took;

    (void)state;
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 8), 0); /* never accepted: the kernel completes the handshake */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &salen), 0);
    sp_alerter_config_defaults(&c);
    snprintf(c.default_webhook_url, sizeof(c.default_webhook_url), "http://127.0.0.1:%u" HOOK_PATH,
             (unsigned)ntohs(sa.sin_port));
    c.shutdown_wait_ms = 300;
    al = make(&c);
    sp_alert_init(&a, SP_ALERT_CONSUMER_LAG, SP_ALERT_WARNING, "consumer lag above threshold",
                  "hangs");
    sp_alerter_raise(al, &a);
    for (int i = 0; i < 50; i++) {
        sp_alerter_get_stats(al, &st);
        if (st.posts > 0)
            break;
        tg_sleep_ms(10);
    }
    assert_int_equal(st.posts, 1);
    tg_sleep_ms(200);
    t0 = tg_now_mono_ms();
    sp_alerter_destroy(&al);
    took = tg_now_mono_ms() - t0;
    close(fd);
    printf("shutdown_hanging: destroy took %llu ms with a POST hanging (deadline 300 ms)\n",
           (unsigned long long)took);
    assert_true(took >= 250);
    assert_true(took <= 300 + 400);
}

/* Runs last: everything the alerters logged in every test above. */
static void test_log_scan(void **state)
{
    FILE *f;
    char line[4096];
    size_t lines = 0, started = 0;

    (void)state;
    fflush(stderr);
    f = fopen(capture_path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        lines++;
        if (strstr(line, "msg=alerter_started") != NULL)
            started++;
        assert_clean("the log", line);
        assert_true(strlen(line) <= TG_LOG_LINE_MAX);
    }
    fclose(f);
    printf("log scan: %zu lines, %zu alerter starts, no webhook URL or key\n", lines, started);
    assert_true(started >= 5);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_flood, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capped_event, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dependency_outage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secrets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_daily_report, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regression_alert_per_request_in_outage, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_server_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_hanging_webhook, setup, teardown),
        cmocka_unit_test(test_log_scan),
    };
    const char *tmp = getenv("TMPDIR");
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_LLM_BINARY\n", argv[0]);
        return 2;
    }
    fake_bin = argv[1];
    snprintf(state_dir, sizeof(state_dir), "%s/tg-alerter-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(state_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(capture_path, sizeof(capture_path), "%s/alerter-stderr.log", state_dir);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (fake_start() != 0) {
        fprintf(stderr, "fake-llm did not start (see %s/fake.log)\n", state_dir);
        fake_stop();
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    fake_stop();
    curl_global_cleanup();
    if (rc == 0) {
        char path[600];

        snprintf(path, sizeof(path), "%s/fake.port", state_dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/fake.log", state_dir);
        unlink(path);
        unlink(capture_path);
        rmdir(state_dir);
    } else {
        printf("state and captured logs kept in %s\n", state_dir);
    }
    return rc;
}
