#include "alerter.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "alert_bucket.h"
#include "alert_dedupe.h"
#include "alert_text.h"
#include "alerter_int.h"
#include "proto_event.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_time.h"
#include "tg_utf8.h"

/* libcurl timeouts for one POST to a webhook. */
#define SP_ALERTER_CONNECT_TIMEOUT_MS 2000
#define SP_ALERTER_TOTAL_TIMEOUT_MS 5000
/* Longest sleep inside a transfer before the shutdown deadline is looked at again. */
#define SP_ALERTER_POLL_INTERVAL_MS 50

static const char *const outcome_names[SP_ALERT_OUTCOME_COUNT] = {"raised", "sent", "suppressed",
                                                                  "dropped", "failed"};

/* ---------------------------------------------------------------------------------------------
 * Counters */

static void count(struct sp_alerter *al, int type, int outcome)
{
    if (type < 0 || type >= SP_ALERT_TYPE_COUNT)
        return;
    atomic_fetch_add_explicit(&al->counts[type][outcome], 1, memory_order_relaxed);
}

/* ---------------------------------------------------------------------------------------------
 * Queue (qmu held) */

static struct alert_item *q_at(struct sp_alerter *al, size_t k)
{
    return &al->queue[(al->qhead + k) % al->qcap];
}

/* Remove entry k, keeping the order of the others. */
static void q_remove(struct sp_alerter *al, size_t k)
{
    for (size_t i = k; i + 1 < al->qlen; i++)
        *q_at(al, i) = *q_at(al, i + 1);
    al->qlen--;
}

/* Make room (counted): drop the oldest alert of the type with the most alerts queued (the
 * oldest of all when there is a tie with the head's type), so that a flood of one type (a
 * failing deployment per request) never pushes out the one alert of another (spend tracking
 * degraded, a budget). */
static void q_drop_oldest(struct sp_alerter *al)
{
    size_t per_type[SP_ALERT_TYPE_COUNT] = {0};
    size_t victim = 0;
    int most;

    for (size_t k = 0; k < al->qlen; k++) {
        int t = (int)q_at(al, k)->alert.type;

        if (t >= 0 && t < SP_ALERT_TYPE_COUNT)
            per_type[t]++;
    }
    most = (int)q_at(al, 0)->alert.type;
    for (int t = 0; t < SP_ALERT_TYPE_COUNT; t++)
        if (most < 0 || most >= SP_ALERT_TYPE_COUNT || per_type[t] > per_type[most])
            most = t;
    for (size_t k = 0; k < al->qlen; k++) {
        if ((int)q_at(al, k)->alert.type == most) {
            victim = k;
            break;
        }
    }
    count(al, most, SP_ALERT_DROPPED);
    TG_WARN_RL("msg=alert_dropped reason=queue_full type=%s capacity=%zu",
               sp_alert_type_name(most), al->qcap);
    q_remove(al, victim);
}

static void q_push_back(struct sp_alerter *al, const struct alert_item *it)
{
    if (al->qlen == al->qcap)
        q_drop_oldest(al);
    *q_at(al, al->qlen) = *it;
    al->qlen++;
}

/* Put an alert back at the head for another try; a full queue makes room as for a new one. */
static void q_push_front(struct sp_alerter *al, const struct alert_item *it)
{
    if (al->qlen == al->qcap)
        q_drop_oldest(al);
    al->qhead = (al->qhead + al->qcap - 1) % al->qcap;
    al->queue[al->qhead] = *it;
    al->qlen++;
}

/* ---------------------------------------------------------------------------------------------
 * Raising */

/* Sanitize a copy of *alert, apply the type filter and (when dedupe) the window, then queue.
 * Returns 0 queued, 1 not queued by design. */
int sp_alerter_enqueue(struct sp_alerter *al, const struct sp_alert *alert, int dedupe)
{
    struct alert_item it;
    uint64_t suppressed = 0;
    uint64_t now = tg_now_mono_ms();
    int type;

    memcpy(&it.alert, alert, sizeof(it.alert));
    sp_alert_sanitize(&it.alert, al->secrets, al->nroutes);
    type = (int)it.alert.type;
    if ((al->cfg.enabled_types & (1u << type)) == 0 || al->type_route[type] < 0)
        return 1;
    count(al, type, SP_ALERT_RAISED);
    it.route = (uint32_t)al->type_route[type];
    it.tries = 0;

    pthread_mutex_lock(&al->qmu);
    if (dedupe) {
        uint64_t ev_before = sp_dedupe_evictions(al->dedupe);
        int pass = sp_dedupe_check(al->dedupe, type, it.alert.subject, now,
                                   (uint64_t)al->cfg.dedupe_window_s * 1000u, &suppressed);

        if (sp_dedupe_evictions(al->dedupe) != ev_before)
            atomic_fetch_add_explicit(&al->dedupe_full, 1, memory_order_relaxed);
        if (!pass) {
            pthread_mutex_unlock(&al->qmu);
            count(al, type, SP_ALERT_SUPPRESSED);
            return 1;
        }
    }
    it.suppressed = suppressed;
    if (atomic_load(&al->stopping)) {
        pthread_mutex_unlock(&al->qmu);
        count(al, type, SP_ALERT_DROPPED);
        return 1;
    }
    q_push_back(al, &it);
    pthread_cond_signal(&al->qcv);
    pthread_mutex_unlock(&al->qmu);
    return 0;
}

int sp_alerter_raise(struct sp_alerter *al, const struct sp_alert *alert)
{
    if (al == NULL || alert == NULL)
        return 1;
    return sp_alerter_enqueue(al, alert, 1);
}

/* ---------------------------------------------------------------------------------------------
 * Sending (sender thread) */

struct post_state {
    struct sp_alerter *al;
    long retry_after_s; /* -1 = none */
};

static size_t post_on_header(char *buf, size_t size, size_t n, void *ud)
{
    struct post_state *ps = ud;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    char val[64];
    size_t vl = 0;
    size_t i = sizeof(name) - 1;

    if (len <= sizeof(name) - 1 || strncasecmp(buf, name, sizeof(name) - 1) != 0)
        return len;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
        i++;
    while (i < len && vl + 1 < sizeof(val) && buf[i] != '\r' && buf[i] != '\n')
        val[vl++] = buf[i++];
    val[vl] = '\0';
    if (vl > 0 && isdigit((unsigned char)val[0])) {
        char *end = NULL;
        unsigned long v = strtoul(val, &end, 10);

        if (end != NULL && *end == '\0')
            ps->retry_after_s = v > 86400 ? 86400 : (long)v;
    } else if (vl > 0) {
        time_t when = curl_getdate(val, NULL);
        time_t now = time(NULL);

        if (when != (time_t)-1)
            ps->retry_after_s = when > now ? (long)(when - now) : 0;
    }
    return len;
}

static size_t post_on_body(char *buf, size_t size, size_t n, void *ud)
{
    (void)buf;
    (void)ud;
    return size * n;
}

/* Abort an in-flight POST once shutdown has used up its time. */
static int post_on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                            curl_off_t ulnow)
{
    struct post_state *ps = ud;

    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    if (atomic_load(&ps->al->stopping) &&
        tg_now_mono_ms() >= atomic_load(&ps->al->stop_deadline_ms))
        return 1;
    return 0;
}

/* Run one transfer on the sender's multi handle, waking at least every
 * SP_ALERTER_POLL_INTERVAL_MS to honour the shutdown deadline (the progress callback of a
 * blocking perform may only come once a second). Returns the transfer's CURLcode, or
 * CURLE_ABORTED_BY_CALLBACK when cut off by shutdown. */
static CURLcode post_drive(struct sp_alerter *al, CURLM *multi, CURL *h)
{
    CURLcode cc = CURLE_SEND_ERROR;
    CURLMsg *msg;
    int running = 1;
    int left;

    if (multi == NULL || curl_multi_add_handle(multi, h) != CURLM_OK)
        return curl_easy_perform(h);
    for (;;) {
        if (curl_multi_perform(multi, &running) != CURLM_OK)
            goto out;
        if (running == 0)
            break;
        if (atomic_load(&al->stopping) && tg_now_mono_ms() >= atomic_load(&al->stop_deadline_ms)) {
            cc = CURLE_ABORTED_BY_CALLBACK;
            goto out;
        }
        if (curl_multi_poll(multi, NULL, 0, SP_ALERTER_POLL_INTERVAL_MS, NULL) != CURLM_OK)
            goto out;
    }
    while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
            cc = msg->data.result;
    }
out:
    curl_multi_remove_handle(multi, h);
    return cc;
}

/* One POST with a fresh easy handle. Returns the CURLcode; *status is the HTTP status (0 when
 * none). */
static CURLcode post_payload(struct sp_alerter *al, CURLM *multi, const char *url, const char *body,
                             size_t len, long *status, long *retry_after_s)
{
    CURL *h = NULL;
    struct curl_slist *hdrs = NULL;
    struct curl_slist *tmp;
    struct post_state ps = {al, -1};
    CURLcode cc = CURLE_OUT_OF_MEMORY;

    *status = 0;
    h = curl_easy_init();
    if (h == NULL)
        goto out;
    tmp = curl_slist_append(hdrs, "Content-Type: application/json; charset=utf-8");
    if (tmp == NULL)
        goto out;
    hdrs = tmp;
    tmp = curl_slist_append(hdrs, "Expect:");
    if (tmp == NULL)
        goto out;
    hdrs = tmp;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)SP_ALERTER_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)SP_ALERTER_TOTAL_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "tollgate-spend-svc");
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, post_on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &ps);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, post_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &ps);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, post_on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &ps);
    cc = post_drive(al, multi, h);
    if (cc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
out:
    *retry_after_s = ps.retry_after_s;
    curl_slist_free_all(hdrs);
    if (h != NULL)
        curl_easy_cleanup(h);
    return cc;
}

/* The answer to one POST. Runs on the sender thread without qmu: route state is only ever
 * touched by the sender thread. Returns 1 when the alert should be queued again (at the head),
 * else 0 (it is counted here). */
static int sender_settle(struct sp_alerter *al, struct alert_item *cur, CURLcode cc, long status,
                         long retry_after_s)
{
    struct route *r = &al->routes[cur->route];
    uint64_t now = tg_now_mono_ms();
    int type = (int)cur->alert.type;
    int retry = 0;

    if (cc == CURLE_OK && status >= 200 && status < 300) {
        r->backoff_ms = 0;
        count(al, type, SP_ALERT_SENT);
        TG_DEBUG("msg=alert_sent webhook=#%" PRIu32 " type=%s tries=%" PRIu32, cur->route,
                 sp_alert_type_name(type), cur->tries);
        return 0;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK) {
        /* Cut off by the shutdown deadline: not the webhook's doing. */
        count(al, type, SP_ALERT_DROPPED);
        return 0;
    }
    if (cc == CURLE_OK && status == 429) {
        uint64_t wait_s = retry_after_s >= 0 ? (uint64_t)retry_after_s : 1;

        atomic_fetch_add_explicit(&al->http_429, 1, memory_order_relaxed);
        if (wait_s > al->cfg.retry_after_max_s)
            wait_s = al->cfg.retry_after_max_s;
        /* Nothing goes to this webhook before Retry-After has passed (+ 1 ms: now is
         * truncated to the millisecond, so never a moment early). The bucket restarts with one
         * token at that moment rather than with what it would have saved up, so a burst does
         * not land the instant the block ends. */
        r->blocked_until_ms = now + wait_s * 1000u + 1u;
        r->tb.tokens = 1.0;
        r->tb.last_ms = r->blocked_until_ms;
        TG_WARN_RL("msg=alert_webhook_throttled webhook=#%" PRIu32 " retry_after_s=%" PRIu64,
                   cur->route, wait_s);
        retry = 1;
    } else if (cc != CURLE_OK || status >= 500 || status == 408) {
        r->backoff_ms = r->backoff_ms == 0 ? al->cfg.retry_base_ms : r->backoff_ms * 2;
        if (r->backoff_ms > al->cfg.retry_max_ms)
            r->backoff_ms = al->cfg.retry_max_ms;
        r->blocked_until_ms = now + r->backoff_ms;
        TG_WARN_RL("msg=alert_send_failed webhook=#%" PRIu32 " type=%s status=%ld error=\"%s\" "
                   "tries=%" PRIu32 " backoff_ms=%" PRIu32,
                   cur->route, sp_alert_type_name(type), status,
                   cc != CURLE_OK ? curl_easy_strerror(cc) : "http", cur->tries, r->backoff_ms);
        retry = 1;
    }
    if (retry && cur->tries < al->cfg.max_tries && !atomic_load(&al->stopping)) {
        atomic_fetch_add_explicit(&al->retries, 1, memory_order_relaxed);
        return 1;
    }
    count(al, type, SP_ALERT_FAILED);
    TG_WARN_RL("msg=alert_given_up webhook=#%" PRIu32 " type=%s status=%ld tries=%" PRIu32,
               cur->route, sp_alert_type_name(type), status, cur->tries);
    return 0;
}

static void abs_deadline(struct timespec *ts, uint64_t wait_ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(wait_ms / 1000u);
    ts->tv_nsec += (long)(wait_ms % 1000u) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *sender_main(void *arg)
{
    struct sp_alerter *al = arg;
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    char payload[TG_ALERT_PAYLOAD_MAX_BYTES + 1];
    /* One multi handle for the thread's life; NULL (out of memory) falls back to blocking
     * performs, still bounded by the transfer timeout and the progress callback. */
    CURLM *multi = curl_multi_init();

    pthread_mutex_lock(&al->qmu);
    for (;;) {
        uint64_t now = tg_now_mono_ms();
        uint64_t wait = UINT64_MAX;
        size_t pick = SIZE_MAX;
        struct alert_item cur;
        struct route *r;
        size_t tlen, plen;
        long status = 0, retry_after_s = -1;
        CURLcode cc;
        int requeue;

        if (atomic_load(&al->stopping) &&
            (al->qlen == 0 || now >= atomic_load(&al->stop_deadline_ms)))
            break;
        if (al->qlen == 0) {
            pthread_cond_wait(&al->qcv, &al->qmu);
            continue;
        }
        for (size_t k = 0; k < al->qlen; k++) {
            struct route *rk = &al->routes[q_at(al, k)->route];
            uint64_t w;

            if (now < rk->blocked_until_ms) {
                w = rk->blocked_until_ms - now;
            } else {
                w = sp_token_bucket_wait_ms(&rk->tb, now);
                if (w == 0) {
                    pick = k;
                    break;
                }
            }
            if (w < wait)
                wait = w;
        }
        if (pick == SIZE_MAX) {
            struct timespec ts;

            if (atomic_load(&al->stopping)) {
                uint64_t left = atomic_load(&al->stop_deadline_ms) - now;

                if (left < wait)
                    wait = left;
            }
            abs_deadline(&ts, wait);
            pthread_cond_timedwait(&al->qcv, &al->qmu, &ts);
            continue;
        }
        cur = *q_at(al, pick);
        q_remove(al, pick);
        r = &al->routes[cur.route];
        sp_token_bucket_take(&r->tb, now);
        cur.tries++;
        pthread_mutex_unlock(&al->qmu);

        /* Build and send without any lock held. */
        tlen = sp_alert_render_text(&cur.alert, cur.suppressed, al->cfg.dedupe_window_s, text,
                                    sizeof(text));
        plen = sp_alert_build_payload(text, tlen, payload, sizeof(payload));
        atomic_fetch_add_explicit(&al->posts, 1, memory_order_relaxed);
        cc = post_payload(al, multi, r->url, payload, plen, &status, &retry_after_s);

        requeue = sender_settle(al, &cur, cc, status, retry_after_s);
        pthread_mutex_lock(&al->qmu);
        if (requeue)
            q_push_front(al, &cur);
    }
    /* Shutdown: whatever is left was not sent in time. */
    while (al->qlen > 0) {
        count(al, (int)q_at(al, 0)->alert.type, SP_ALERT_DROPPED);
        al->qhead = (al->qhead + 1) % al->qcap;
        al->qlen--;
    }
    pthread_mutex_unlock(&al->qmu);
    if (multi != NULL)
        curl_multi_cleanup(multi);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Metrics */

void sp_alerter_write_metrics(struct sp_alerter *al, struct tg_buf *b)
{
    static const char *const tables[] = {"dedupe", "deployments", "model_groups"};
    uint64_t hits[3];
    size_t depth;

    if (al == NULL || b == NULL)
        return;
    tg_prom_header(b, "tollgate_spend_alerts_total", "counter",
                   "Alerts by type and outcome (raised, sent, suppressed, dropped, failed).");
    for (int t = 0; t < SP_ALERT_TYPE_COUNT; t++) {
        for (int o = 0; o < SP_ALERT_OUTCOME_COUNT; o++) {
            struct tg_label l[2] = {{"type", sp_alert_type_name(t)},
                                    {"outcome", outcome_names[o]}};

            tg_prom_sample_u64(b, "tollgate_spend_alerts_total", l, 2,
                               atomic_load_explicit(&al->counts[t][o], memory_order_relaxed));
        }
    }
    pthread_mutex_lock(&al->qmu);
    depth = al->qlen;
    pthread_mutex_unlock(&al->qmu);
    tg_prom_gauge(b, "tollgate_spend_alert_queue_depth", "Alerts waiting to be sent.",
                  (double)depth);
    hits[0] = atomic_load(&al->dedupe_full);
    hits[1] = atomic_load(&al->deployments_full);
    hits[2] = atomic_load(&al->groups_full);
    tg_prom_header(b, "tollgate_spend_alert_capacity_hits_total", "counter",
                   "Alerter tables found full (dedupe: oldest evicted; detectors: not tracked).");
    for (int i = 0; i < 3; i++) {
        struct tg_label l = {"table", tables[i]};

        tg_prom_sample_u64(b, "tollgate_spend_alert_capacity_hits_total", &l, 1, hits[i]);
    }
}

void sp_alerter_get_stats(struct sp_alerter *al, struct sp_alerter_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (al == NULL)
        return;
    for (int t = 0; t < SP_ALERT_TYPE_COUNT; t++) {
        for (int o = 0; o < SP_ALERT_OUTCOME_COUNT; o++)
            out->alerts[t][o] = atomic_load(&al->counts[t][o]);
    }
    pthread_mutex_lock(&al->qmu);
    out->queue_depth = al->qlen;
    pthread_mutex_unlock(&al->qmu);
    out->posts = atomic_load(&al->posts);
    out->http_429 = atomic_load(&al->http_429);
    out->retries = atomic_load(&al->retries);
    out->dedupe_full = atomic_load(&al->dedupe_full);
    out->deployments_full = atomic_load(&al->deployments_full);
    out->groups_full = atomic_load(&al->groups_full);
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int url_plausible(const char *url)
{
    return strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0;
}

static int config_check(const struct sp_alerter_config *c, char *err, size_t errlen)
{
    const char *what = NULL;

    if (!(c->rate_per_second > 0) || c->rate_per_second > 100)
        what = "rate_per_second must be > 0 and <= 100";
    else if (c->burst < 1)
        what = "burst must be >= 1";
    else if (c->queue_capacity < 1)
        what = "queue_capacity must be >= 1";
    else if (c->max_tries < 1)
        what = "max_tries must be >= 1";
    else if (c->dedupe_capacity < 1)
        what = "dedupe_capacity must be >= 1";
    else if (c->deployments_capacity < 1 || c->model_groups_capacity < 1)
        what = "detector capacities must be >= 1";
    else if (c->reminder_interval_s < 1)
        what = "reminder_interval_s must be >= 1";
    else if (c->failure_window_s < 1 || c->slow_request_window_s < 1)
        what = "windows must be >= 1 s";
    else if (!(c->failure_ratio > 0) || c->failure_ratio > 1)
        what = "failure_ratio must be > 0 and <= 1";
    else if (c->failure_count < 1 || c->failure_min_requests < 1 || c->slow_request_count < 1)
        what = "failure_count, failure_min_requests and slow_request_count must be >= 1";
    else if (c->nbudget_thresholds < 1 || c->nbudget_thresholds > SP_ALERTER_BUDGET_THRESHOLDS_MAX)
        what = "budget_thresholds needs 1 to 8 entries";
    else if (c->daily_report_hour < -1 || c->daily_report_hour > 23)
        what = "daily_report_hour must be -1..23";
    else if (c->retry_base_ms < 1 || c->retry_max_ms < c->retry_base_ms)
        what = "retry_base_ms must be >= 1 and <= retry_max_ms";
    else if (c->retry_after_max_s < 1)
        what = "retry_after_max_s must be >= 1";
    else if (c->default_webhook_url[0] != '\0' && !url_plausible(c->default_webhook_url))
        what = "default_webhook_url is not an http(s) URL";
    for (int t = 0; what == NULL && t < SP_ALERT_TYPE_COUNT; t++) {
        if (c->type_webhook_url[t][0] != '\0' && !url_plausible(c->type_webhook_url[t]))
            what = "a webhook URL in alert_to_webhook_url is not an http(s) URL";
    }
    if (what != NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "alerting: %s", what);
        return TG_ECONFIG;
    }
    return 0;
}

/* alerter_free: frees al (taken) and what it holds, the thread already joined or never
 * started; sync_ready: its mutexes and condition variable were initialised. */
static void alerter_free(struct sp_alerter *al, int sync_ready)
{
    if (sync_ready) {
        pthread_cond_destroy(&al->qcv);
        pthread_mutex_destroy(&al->dmu);
        pthread_mutex_destroy(&al->qmu);
    }
    sp_alert_det_fini(&al->groups);
    sp_alert_det_fini(&al->deployments);
    sp_dedupe_destroy(&al->dedupe);
    free(al->queue);
    free(al);
}

struct sp_alerter *sp_alerter_create(const struct sp_alerter_config *cfg, char *err, size_t errlen)
{
    struct sp_alerter *al = NULL;
    pthread_condattr_t ca;
    int sync_ready = 0;
    uint64_t now = tg_now_mono_ms();
    char routes_desc[256];
    size_t rdl = 0;
    const char *why = "out of memory";

    if (cfg == NULL) {
        why = "no configuration";
        goto fail;
    }
    if (config_check(cfg, err, errlen) != 0)
        return NULL;
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        why = "libcurl initialisation failed";
        goto fail;
    }
    al = calloc(1, sizeof(*al));
    if (al == NULL)
        goto fail;
    al->cfg = *cfg;
    /* The configuration copy must end every string, whatever the caller left in it. */
    al->cfg.default_webhook_url[SP_ALERTER_URL_CAP - 1] = '\0';
    al->last_report_day = -1;
    routes_desc[0] = '\0';
    for (int t = 0; t < SP_ALERT_TYPE_COUNT; t++) {
        const char *url;
        uint32_t r;

        al->cfg.type_webhook_url[t][SP_ALERTER_URL_CAP - 1] = '\0';
        url = al->cfg.type_webhook_url[t][0] != '\0' ? al->cfg.type_webhook_url[t]
                                                     : al->cfg.default_webhook_url;
        al->type_route[t] = -1;
        if (url[0] == '\0' || (al->cfg.enabled_types & (1u << t)) == 0)
            continue;
        for (r = 0; r < al->nroutes; r++) {
            if (strcmp(al->routes[r].url, url) == 0)
                break;
        }
        if (r == al->nroutes) {
            memcpy(al->routes[r].url, url, strlen(url) + 1);
            sp_token_bucket_init(&al->routes[r].tb, al->cfg.rate_per_second, al->cfg.burst, now);
            al->secrets[r] = al->routes[r].url;
            al->nroutes++;
        }
        al->type_route[t] = (int)r;
        if (rdl < sizeof(routes_desc)) {
            int n = snprintf(routes_desc + rdl, sizeof(routes_desc) - rdl, "%s%s:webhook#%u",
                             rdl > 0 ? "," : "", sp_alert_type_name(t), r);

            if (n > 0)
                rdl += (size_t)n;
        }
    }
    al->qcap = al->cfg.queue_capacity;
    al->queue = calloc(al->qcap, sizeof(*al->queue));
    if (al->queue == NULL)
        goto fail;
    al->dedupe = sp_dedupe_create(al->cfg.dedupe_capacity);
    if (al->dedupe == NULL)
        goto fail;
    if (sp_alert_det_init(&al->deployments, al->cfg.deployments_capacity,
                       (uint64_t)al->cfg.failure_window_s * 1000u) != 0)
        goto fail;
    if (sp_alert_det_init(&al->groups, al->cfg.model_groups_capacity,
                       (uint64_t)al->cfg.slow_request_window_s * 1000u) != 0)
        goto fail;
    pthread_mutex_init(&al->qmu, NULL);
    pthread_mutex_init(&al->dmu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&al->qcv, &ca);
    pthread_condattr_destroy(&ca);
    sync_ready = 1;
    if (pthread_create(&al->thread, NULL, sender_main, al) != 0) {
        why = "cannot start the sender thread";
        goto fail;
    }
    al->thread_started = 1;
    TG_INFO("msg=alerter_started webhooks=%" PRIu32 " routes=%s rate_per_s=%.3g burst=%" PRIu32
            " dedupe_window_s=%" PRIu32 " queue_capacity=%" PRIu32,
            al->nroutes, rdl > 0 ? routes_desc : "none", al->cfg.rate_per_second, al->cfg.burst,
            al->cfg.dedupe_window_s, al->cfg.queue_capacity);
    return al;

fail:
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "alerting: %s", why);
    if (al != NULL)
        alerter_free(al, sync_ready);
    return NULL;
}

void sp_alerter_destroy(struct sp_alerter **alp)
{
    struct sp_alerter *al;
    struct sp_alerter_stats st;

    if (alp == NULL || *alp == NULL)
        return;
    al = *alp;
    *alp = NULL;
    pthread_mutex_lock(&al->qmu);
    atomic_store(&al->stop_deadline_ms, tg_now_mono_ms() + al->cfg.shutdown_wait_ms);
    atomic_store(&al->stopping, 1);
    pthread_cond_broadcast(&al->qcv);
    pthread_mutex_unlock(&al->qmu);
    if (al->thread_started)
        pthread_join(al->thread, NULL);
    sp_alerter_get_stats(al, &st);
    TG_INFO("msg=alerter_stopped posts=%" PRIu64 " http_429=%" PRIu64 " retries=%" PRIu64, st.posts,
            st.http_429, st.retries);
    alerter_free(al, 1);
}
