/* alert_detect: the alerter's detectors: windowed deployment-failure and slow-request tables,
 * the degraded-state machines of the dependencies and of consumer lag, budget thresholds and the
 * daily report. Each turns what it observes into a struct sp_alert and queues it through
 * sp_alerter_enqueue. The tables and states are guarded by the alerter's dmu (taken here, before
 * qmu, never the reverse). */
#include "alerter.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alert_text.h"
#include "alerter_int.h"
#include "proto_event.h"
#include "tg_err.h"
#include "tg_hash.h"
#include "tg_log.h"
#include "tg_time.h"
#include "tg_utf8.h"

static const char *const dep_names[SP_ALERTER_DEPS] = {"postgres", "redis", "kafka",
                                                       "dead_letters"};

/* printf into a fixed field (subject, summary), cut at a UTF-8 boundary. */
static void field_printf(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void field_printf(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= cap) {
        size_t keep = tg_utf8_boundary(dst, cap - 1, cap - 1);

        dst[keep] = '\0';
    }
}

/* ---------------------------------------------------------------------------------------------
 * Detector tables (dmu held) */

static uint64_t str_hash(const char *s, size_t cap)
{
    uint64_t h = tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, s, strnlen(s, cap));

    return h == 0 ? 1 : h;
}

int sp_alert_det_init(struct det_table *t, size_t capacity, uint64_t window_ms)
{
    size_t n = 4;

    while (n < capacity * 2)
        n *= 2;
    t->slots = calloc(n, sizeof(*t->slots));
    t->spare = calloc(n, sizeof(*t->spare));
    if (t->slots == NULL || t->spare == NULL)
        return TG_ENOMEM;
    t->nslots = n;
    t->capacity = capacity;
    t->window_ms = window_ms;
    return 0;
}

void sp_alert_det_fini(struct det_table *t)
{
    free(t->slots);
    free(t->spare);
    t->slots = NULL;
    t->spare = NULL;
}

static struct det_entry *det_probe(struct det_entry *slots, size_t nslots, uint64_t h,
                                   const char *key)
{
    size_t mask = nslots - 1;

    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        struct det_entry *e = &slots[i];

        if (e->hash == 0)
            return e;
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    }
}

/* Drop entries whose window ended long enough ago to carry no information. */
static void det_rebuild(struct det_table *t, uint64_t now)
{
    struct det_entry *old = t->slots;
    size_t kept = 0;

    memset(t->spare, 0, t->nslots * sizeof(*t->spare));
    for (size_t i = 0; i < t->nslots; i++) {
        struct det_entry *e = &old[i];

        if (e->hash == 0)
            continue;
        if (now >= e->window_start_ms && now - e->window_start_ms >= t->window_ms)
            continue;
        *det_probe(t->spare, t->nslots, e->hash, e->key) = *e;
        kept++;
    }
    t->slots = t->spare;
    t->spare = old;
    t->count = kept;
    t->last_rebuild_ms = now;
    t->rebuilt_once = 1;
}

/* The entry for key with its window rolled to now, or NULL when the table is full. */
static struct det_entry *det_get(struct det_table *t, const char *key, uint64_t now)
{
    uint64_t h = str_hash(key, PROTO_MODEL_CAP);
    struct det_entry *e = det_probe(t->slots, t->nslots, h, key);

    if (e->hash == 0) {
        if (t->count >= t->capacity) {
            if (t->rebuilt_once && now - t->last_rebuild_ms < t->window_ms)
                return NULL;
            det_rebuild(t, now);
            if (t->count >= t->capacity)
                return NULL;
            e = det_probe(t->slots, t->nslots, h, key);
        }
        memset(e, 0, sizeof(*e));
        e->hash = h;
        tg_utf8_copy(e->key, sizeof(e->key), key);
        e->window_start_ms = now;
        t->count++;
    }
    if (now < e->window_start_ms || now - e->window_start_ms >= t->window_ms) {
        e->window_start_ms = now;
        e->total = 0;
        e->hits = 0;
        e->alerted = 0;
        e->worst_ms = 0;
    }
    return e;
}

/* ---------------------------------------------------------------------------------------------
 * Detectors */

static int attempt_failed(int32_t status, const char *error_class)
{
    if (status == 429 || status >= 500)
        return 1;
    return status == 0 && error_class[0] != '\0';
}

/* A safe copy of a fixed field of an event that may not be NUL-terminated. */
static void ev_copy(char *dst, size_t dstcap, const char *src, size_t srccap)
{
    size_t n = strnlen(src, srccap);

    if (n >= dstcap)
        n = dstcap - 1;
    n = tg_utf8_boundary(src, strnlen(src, srccap), n);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void observe_attempt(struct sp_alerter *al, const char *deployment, const char *group,
                            int32_t status, const char *error_class, const char *message,
                            uint64_t now)
{
    const struct sp_alerter_config *c = &al->cfg;
    struct det_entry *e;
    struct sp_alert a;
    int fire;

    if (deployment[0] == '\0')
        return;
    e = det_get(&al->deployments, deployment, now);
    if (e == NULL) {
        atomic_fetch_add_explicit(&al->deployments_full, 1, memory_order_relaxed);
        return;
    }
    if (group[0] != '\0')
        tg_utf8_copy(e->group, sizeof(e->group), group);
    if (e->total < UINT32_MAX)
        e->total++;
    if (attempt_failed(status, error_class)) {
        if (e->hits < UINT32_MAX)
            e->hits++;
        e->last_status = status;
        tg_utf8_copy(e->last_error_class, sizeof(e->last_error_class), error_class);
        tg_utf8_copy(e->last_message, sizeof(e->last_message), message);
    }
    if (e->alerted || e->hits == 0)
        return;
    fire = e->hits >= c->failure_count || (e->total >= c->failure_min_requests &&
                                           (double)e->hits >= c->failure_ratio * (double)e->total);
    if (!fire)
        return;
    e->alerted = 1;
    sp_alert_init(&a, SP_ALERT_DEPLOYMENT_FAILURES, SP_ALERT_WARNING, NULL, NULL);
    field_printf(a.subject, sizeof(a.subject), "deployment %s failing", e->key);
    field_printf(a.summary, sizeof(a.summary),
                 "%" PRIu32 " of %" PRIu32 " attempts failed within %" PRIu32 " s", e->hits,
                 e->total, c->failure_window_s);
    sp_alert_add_field(&a, "deployment", e->key);
    sp_alert_add_field(&a, "model_group", e->group);
    sp_alert_add_fieldf(&a, "failures", "%" PRIu32, e->hits);
    sp_alert_add_fieldf(&a, "attempts", "%" PRIu32, e->total);
    sp_alert_add_fieldf(&a, "failure_ratio", "%.2f", (double)e->hits / (double)e->total);
    sp_alert_add_fieldf(&a, "last_status", "%" PRId32, e->last_status);
    sp_alert_add_field(&a, "last_error", e->last_error_class);
    sp_alert_add_field(&a, "last_message", e->last_message);
    sp_alerter_enqueue(al, &a, 1);
}

static void observe_slow(struct sp_alerter *al, const char *group, int64_t latency_ms, uint64_t now)
{
    const struct sp_alerter_config *c = &al->cfg;
    struct det_entry *e;
    struct sp_alert a;

    if (group[0] == '\0')
        return;
    e = det_get(&al->groups, group, now);
    if (e == NULL) {
        atomic_fetch_add_explicit(&al->groups_full, 1, memory_order_relaxed);
        return;
    }
    if (e->total < UINT32_MAX)
        e->total++;
    if (latency_ms <= (int64_t)c->slow_request_threshold_ms)
        return;
    if (e->hits < UINT32_MAX)
        e->hits++;
    if (latency_ms > e->worst_ms)
        e->worst_ms = latency_ms;
    if (e->alerted || e->hits < c->slow_request_count)
        return;
    e->alerted = 1;
    sp_alert_init(&a, SP_ALERT_SLOW_REQUESTS, SP_ALERT_WARNING, NULL, NULL);
    field_printf(a.subject, sizeof(a.subject), "model group %s slow", e->key);
    field_printf(a.summary, sizeof(a.summary),
                 "%" PRIu32 " of %" PRIu32 " requests took longer than %" PRIu32
                 " ms within %" PRIu32 " s",
                 e->hits, e->total, c->slow_request_threshold_ms, c->slow_request_window_s);
    sp_alert_add_field(&a, "model_group", e->key);
    sp_alert_add_fieldf(&a, "slow_requests", "%" PRIu32, e->hits);
    sp_alert_add_fieldf(&a, "requests", "%" PRIu32, e->total);
    sp_alert_add_fieldf(&a, "threshold_ms", "%" PRIu32, c->slow_request_threshold_ms);
    sp_alert_add_fieldf(&a, "slowest_ms", "%" PRId64, e->worst_ms);
    sp_alerter_enqueue(al, &a, 1);
}

void sp_alerter_observe_event_at(struct sp_alerter *al, const struct proto_event *ev,
                                 uint64_t now_ms)
{
    char deployment[PROTO_NAME_CAP];
    char group[PROTO_MODEL_CAP];
    char error_class[PROTO_ERROR_CLASS_CAP];
    char message[PROTO_MESSAGE_CAP];
    uint32_t n;

    if (al == NULL || ev == NULL)
        return;
    ev_copy(deployment, sizeof(deployment), ev->deployment_id, sizeof(ev->deployment_id));
    ev_copy(group, sizeof(group), ev->model_group, sizeof(ev->model_group));
    if (group[0] == '\0')
        ev_copy(group, sizeof(group), ev->model_requested, sizeof(ev->model_requested));
    ev_copy(error_class, sizeof(error_class), ev->error_class, sizeof(ev->error_class));
    n = ev->trail_len > PROTO_TRAIL_MAX ? PROTO_TRAIL_MAX : ev->trail_len;

    pthread_mutex_lock(&al->dmu);
    if (ev->kind == PROTO_KIND_COOLDOWN) {
        struct sp_alert a;

        message[0] = '\0';
        if (n > 0)
            ev_copy(message, sizeof(message), ev->trail[n - 1].message,
                    sizeof(ev->trail[n - 1].message));
        sp_alert_init(&a, SP_ALERT_DEPLOYMENT_FAILURES, SP_ALERT_WARNING, NULL, NULL);
        field_printf(a.subject, sizeof(a.subject), "deployment %s cooled down", deployment);
        field_printf(a.summary, sizeof(a.summary),
                     "the router took deployment %s of model group %s out of rotation", deployment,
                     group);
        sp_alert_add_field(&a, "deployment", deployment);
        sp_alert_add_field(&a, "model_group", group);
        sp_alert_add_fieldf(&a, "status", "%" PRId32, ev->status);
        sp_alert_add_field(&a, "error", error_class);
        sp_alert_add_field(&a, "last_message", message);
        sp_alerter_enqueue(al, &a, 1);
        pthread_mutex_unlock(&al->dmu);
        return;
    }
    if (n == 0) {
        observe_attempt(al, deployment, group, ev->status, error_class, "", now_ms);
    } else {
        for (uint32_t i = 0; i < n; i++) {
            const struct proto_attempt *at = &ev->trail[i];
            char adep[PROTO_NAME_CAP];
            char agroup[PROTO_MODEL_CAP];
            char aclass[PROTO_ERROR_CLASS_CAP];

            ev_copy(adep, sizeof(adep), at->deployment_id, sizeof(at->deployment_id));
            ev_copy(agroup, sizeof(agroup), at->group, sizeof(at->group));
            ev_copy(aclass, sizeof(aclass), at->error_class, sizeof(at->error_class));
            ev_copy(message, sizeof(message), at->message, sizeof(at->message));
            observe_attempt(al, adep, agroup, at->http_status, aclass, message, now_ms);
        }
    }
    observe_slow(al, group, ev->latency_ms, now_ms);
    pthread_mutex_unlock(&al->dmu);
}

void sp_alerter_observe_event(struct sp_alerter *al, const struct proto_event *ev)
{
    sp_alerter_observe_event_at(al, ev, tg_now_mono_ms());
}

/* The degraded-state machine shared by dependencies and consumer lag (dmu held).
 *
 *   healthy --unhealthy--> down (alert)            down --due--> down (reminder)
 *   down --healthy--> recovering                   recovering --unhealthy--> down (silent)
 *   recovering --healthy for recovery_hold_s--> healthy (recovery alert)
 *
 * A report of "healthy" in the middle of an outage (one reconnect that works, one clean batch)
 * therefore does not end it: the outage gives one alert and one recovery. Transitions of
 * postgres, redis, kafka and consumer lag bypass de-duplication on purpose: the machine already
 * makes them once per outage, and a second outage soon after a recovery must not be hidden.
 * Dead letters come and go with batches, so theirs are de-duplicated like other alerts. */
static void state_update(struct sp_alerter *al, struct dep_state *st, int type, const char *what,
                         const char *down_text, int healthy, uint64_t now, const char *detail,
                         int dedupe)
{
    uint64_t reminder_ms = (uint64_t)al->cfg.reminder_interval_s * 1000u;
    uint64_t hold_ms = (uint64_t)al->cfg.recovery_hold_s * 1000u;
    uint64_t down_s;
    struct sp_alert a;

    if (!st->unhealthy) {
        if (healthy)
            return;
        st->unhealthy = 1;
        st->recovering = 0;
        st->down_since_ms = now;
        st->last_notice_ms = now;
        sp_alert_init(&a, (enum sp_alert_type)type, SP_ALERT_CRITICAL, NULL, NULL);
        field_printf(a.subject, sizeof(a.subject), "%s %s", what, down_text);
        field_printf(a.summary, sizeof(a.summary),
                     "%s %s; spend tracking continues and catches up on recovery", what, down_text);
        sp_alert_add_field(&a, "dependency", what);
        sp_alert_add_field(&a, "state", "degraded");
        if (detail != NULL)
            sp_alert_add_field(&a, "detail", detail);
        TG_WARN("msg=spend_tracking_degraded what=\"%s\"", what);
        sp_alerter_enqueue(al, &a, dedupe);
        return;
    }
    if (!healthy) {
        st->recovering = 0;
        if (now < st->last_notice_ms || now - st->last_notice_ms < reminder_ms)
            return;
        st->last_notice_ms = now;
        down_s = now >= st->down_since_ms ? (now - st->down_since_ms) / 1000u : 0;
        sp_alert_init(&a, (enum sp_alert_type)type, SP_ALERT_CRITICAL, NULL, NULL);
        field_printf(a.subject, sizeof(a.subject), "%s %s", what, down_text);
        field_printf(a.summary, sizeof(a.summary), "reminder: %s still %s after %" PRIu64 " s",
                     what, down_text, down_s);
        sp_alert_add_field(&a, "dependency", what);
        sp_alert_add_field(&a, "state", "still degraded");
        sp_alert_add_fieldf(&a, "down_for_s", "%" PRIu64, down_s);
        if (detail != NULL)
            sp_alert_add_field(&a, "detail", detail);
        sp_alerter_enqueue(al, &a, 0);
        return;
    }
    if (!st->recovering) {
        st->recovering = 1;
        st->healthy_since_ms = now;
    }
    if (now < st->healthy_since_ms || now - st->healthy_since_ms < hold_ms)
        return;
    st->unhealthy = 0;
    st->recovering = 0;
    down_s = st->healthy_since_ms >= st->down_since_ms
                 ? (st->healthy_since_ms - st->down_since_ms) / 1000u
                 : 0;
    sp_alert_init(&a, (enum sp_alert_type)type, SP_ALERT_INFO, NULL, NULL);
    field_printf(a.subject, sizeof(a.subject), "%s recovered", what);
    field_printf(a.summary, sizeof(a.summary), "%s recovered after %" PRIu64 " s", what, down_s);
    sp_alert_add_field(&a, "dependency", what);
    sp_alert_add_field(&a, "state", "recovered");
    sp_alert_add_fieldf(&a, "down_for_s", "%" PRIu64, down_s);
    if (detail != NULL)
        sp_alert_add_field(&a, "detail", detail);
    TG_INFO("msg=spend_tracking_recovered what=\"%s\" down_s=%" PRIu64, what, down_s);
    sp_alerter_enqueue(al, &a, dedupe);
}

int sp_alerter_dependency_state(struct sp_alerter *al, const char *dependency, int healthy,
                                uint64_t now_ms)
{
    int idx = -1;

    if (al == NULL || dependency == NULL)
        return TG_EINVAL;
    for (int i = 0; i < SP_ALERTER_DEPS; i++) {
        if (strcmp(dependency, dep_names[i]) == 0)
            idx = i;
    }
    if (idx < 0)
        return TG_EINVAL;
    pthread_mutex_lock(&al->dmu);
    state_update(al, &al->deps[idx], SP_ALERT_SPEND_TRACKING_DEGRADED, dep_names[idx],
                 idx == 3 ? "receiving dead letters" : "unreachable", healthy != 0, now_ms, NULL,
                 idx == 3);
    pthread_mutex_unlock(&al->dmu);
    return 0;
}

void sp_alerter_consumer_lag(struct sp_alerter *al, int64_t total_lag, uint64_t now_ms)
{
    char detail[64];
    int healthy;

    if (al == NULL)
        return;
    healthy = total_lag <= 0 || (uint64_t)total_lag <= al->cfg.consumer_lag_threshold;
    snprintf(detail, sizeof(detail), "lag %" PRId64 " messages, threshold %" PRIu64, total_lag,
             al->cfg.consumer_lag_threshold);
    pthread_mutex_lock(&al->dmu);
    state_update(al, &al->deps[SP_ALERTER_LAG_STATE], SP_ALERT_CONSUMER_LAG, "consumer lag",
                 "above threshold", healthy, now_ms, detail, 0);
    pthread_mutex_unlock(&al->dmu);
}

uint32_t sp_alerter_budget(struct sp_alerter *al, const char *scope, const char *name,
                           int64_t prev_spend_nusd, int64_t spend_nusd, int64_t max_budget_nusd)
{
    uint32_t crossed = 0;
    struct sp_alert a;
    char spend[48], budget[48];

    if (al == NULL || max_budget_nusd <= 0)
        return 0;
    for (uint32_t i = 0; i < al->cfg.nbudget_thresholds; i++) {
        __int128 mark = (__int128)max_budget_nusd * al->cfg.budget_thresholds[i];

        if ((__int128)prev_spend_nusd * 100 < mark && (__int128)spend_nusd * 100 >= mark)
            crossed = al->cfg.budget_thresholds[i];
    }
    if (crossed == 0)
        return 0;
    if (scope == NULL || (strcmp(scope, "key") != 0 && strcmp(scope, "team") != 0))
        scope = "key";
    sp_alert_format_usd(spend_nusd, spend, sizeof(spend));
    sp_alert_format_usd(max_budget_nusd, budget, sizeof(budget));
    sp_alert_init(&a, SP_ALERT_BUDGET,
                  crossed >= 100 ? SP_ALERT_CRITICAL
                                 : (crossed >= 80 ? SP_ALERT_WARNING : SP_ALERT_INFO),
                  NULL, NULL);
    /* %.64s: the caller's string is read up to the cap, never scanned to its end. */
    field_printf(a.subject, sizeof(a.subject), "%s %.64s reached %" PRIu32 "%% of budget", scope,
                 name != NULL ? name : "", crossed);
    field_printf(a.summary, sizeof(a.summary), "%s %.64s has spent %s of its %s budget%s", scope,
                 name != NULL ? name : "", spend, budget,
                 crossed >= 100 ? "; requests are now refused" : "");
    sp_alert_add_field(&a, "scope", scope);
    sp_alert_add_field(&a, "name", name);
    sp_alert_add_field(&a, "spend", spend);
    sp_alert_add_field(&a, "max_budget", budget);
    sp_alert_add_fieldf(&a, "threshold", "%" PRIu32 "%%", crossed);
    sp_alerter_enqueue(al, &a, 1);
    return crossed;
}

static void format_day(int64_t day, char out[11])
{
    time_t t = (time_t)(day * 86400);
    struct tm tm;

    gmtime_r(&t, &tm);
    snprintf(out, 11, "%04u-%02u-%02u", (unsigned)(tm.tm_year + 1900) % 10000u,
             (unsigned)(tm.tm_mon + 1) % 100u, (unsigned)tm.tm_mday % 100u);
}

int sp_alerter_daily_report_due(struct sp_alerter *al, uint64_t now_epoch_ms, char day[11])
{
    int64_t today = (int64_t)(now_epoch_ms / 86400000u);
    int hour = (int)((now_epoch_ms % 86400000u) / 3600000u);
    int due = 0;

    if (al == NULL || al->cfg.daily_report_hour < 0 ||
        (al->cfg.enabled_types & (1u << SP_ALERT_DAILY_REPORT)) == 0 ||
        al->type_route[SP_ALERT_DAILY_REPORT] < 0)
        return 0;
    pthread_mutex_lock(&al->dmu);
    if (hour >= al->cfg.daily_report_hour && al->last_report_day != today) {
        al->last_report_day = today;
        format_day(today - 1, day);
        due = 1;
    }
    pthread_mutex_unlock(&al->dmu);
    return due;
}

void sp_alerter_daily_report(struct sp_alerter *al, const char *day, int64_t total_cost_nusd,
                             int64_t total_requests, const struct sp_report_row *rows, size_t nrows)
{
    static const char *const dims[] = {"key", "team", "model"};
    static const char *const labels[] = {"top keys", "top teams", "top models"};
    struct sp_alert a;
    char total[48];
    char dayc[11];

    if (al == NULL)
        return;
    if (nrows > SP_ALERTER_REPORT_ROWS_MAX)
        nrows = SP_ALERTER_REPORT_ROWS_MAX;
    if (rows == NULL)
        nrows = 0;
    tg_utf8_copy(dayc, sizeof(dayc), day != NULL ? day : "");
    sp_alert_format_usd(total_cost_nusd, total, sizeof(total));
    sp_alert_init(&a, SP_ALERT_DAILY_REPORT, SP_ALERT_INFO, NULL, NULL);
    field_printf(a.subject, sizeof(a.subject), "daily spend report %s", dayc);
    field_printf(a.summary, sizeof(a.summary), "Spend on %s: %s over %" PRId64 " requests", dayc,
                 total, total_requests);
    /* One field per dimension, rows appended while they fit; a dimension that overflows its
     * field continues in the next one while fields remain. */
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
        char value[SP_ALERT_FIELD_VALUE_CAP];
        size_t vlen = 0;

        value[0] = '\0';
        for (size_t i = 0; i < nrows; i++) {
            char item[SP_ALERT_FIELD_VALUE_CAP];
            char cost[48];
            char rname[sizeof(rows[i].name)];
            char rdim[sizeof(rows[i].dimension)];
            int n;

            ev_copy(rdim, sizeof(rdim), rows[i].dimension, sizeof(rows[i].dimension));
            if (strcmp(rdim, dims[d]) != 0)
                continue;
            ev_copy(rname, sizeof(rname), rows[i].name, sizeof(rows[i].name));
            sp_alert_format_usd(rows[i].cost_nusd, cost, sizeof(cost));
            n = snprintf(item, sizeof(item), "%s%s %s (%" PRId64 " req)", vlen > 0 ? ", " : "",
                         rname, cost, rows[i].requests);
            if (n < 0)
                continue;
            if (vlen + (size_t)n >= sizeof(value) && vlen > 0) {
                if (sp_alert_add_field(&a, labels[d], value) != 0)
                    break;
                vlen = 0;
                n = snprintf(item, sizeof(item), "%s %s (%" PRId64 " req)", rname, cost,
                             rows[i].requests);
                if (n < 0)
                    continue;
            }
            if ((size_t)n >= sizeof(value))
                n = (int)tg_utf8_boundary(item, strlen(item), sizeof(value) - 1);
            memcpy(value + vlen, item, (size_t)n);
            vlen += (size_t)n;
            value[vlen] = '\0';
        }
        if (vlen > 0)
            sp_alert_add_field(&a, labels[d], value);
    }
    sp_alerter_enqueue(al, &a, 1);
}

