#include "rt_metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_metrics_litellm.h"
#include "tg_hash.h"
#include "tg_metrics.h"

/* Status codes with their own series; everything else is counted under "other". */
static const int status_codes[] = {200, 400, 401, 403, 404, 408, 413, 422, 429, 500, 502, 503, 504};
#define N_STATUS (sizeof(status_codes) / sizeof(status_codes[0]) + 1)

/* The outcome label of an attempt, by error class (the metric's own vocabulary). */
static const char *const outcome_names[RT_ERR_CLASSES] = {
    [RT_ERR_NONE] = "success",
    [RT_ERR_RATE_LIMIT] = "rate_limited",
    [RT_ERR_SERVER] = "server_error",
    [RT_ERR_TIMEOUT] = "timeout",
    [RT_ERR_CONNECT] = "connect_error",
    [RT_ERR_CONTEXT_WINDOW] = "context_window",
    [RT_ERR_CONTENT_POLICY] = "content_policy",
    [RT_ERR_BAD_REQUEST] = "client_error",
    [RT_ERR_INVALID_RESPONSE] = "invalid_response",
    [RT_ERR_AUTH] = "auth_error"};

static const char *const reject_names[RT_REJECT_COUNT] = {
    "body_too_large", "in_flight_full", "upstream_full", "bad_json",
    "auth",           "shutting_down",  "not_admitted",  "headers_too_large"};

struct rt_metrics {
    const struct rt_config *cfg;
    size_t ngroups;                /* distinct groups; row ngroups is "" (no group resolved) */
    const char **groups;           /* borrowed names, ngroups */
    struct tg_names *group_names;  /* name -> row: a hash, not a loop, on every request */
    struct tg_names *dep_ids;      /* deployment id -> index */
    _Atomic uint64_t *requests;    /* (ngroups + 1) x N_STATUS */
    _Atomic uint64_t *retries;     /* ngroups + 1 */
    _Atomic uint64_t *fallbacks;   /* (ngroups + 1) x (ngroups + 1) */
    struct tg_histogram *duration; /* ngroups + 1 */
    size_t ndeps;
    _Atomic uint64_t *attempts;  /* ndeps x RT_ERR_CLASSES */
    _Atomic uint64_t *cooldowns; /* ndeps */
    _Atomic uint64_t *unpriced;  /* ndeps: calls with tokens and no price */
    struct tg_histogram overhead;
    _Atomic int64_t in_flight;
    _Atomic uint64_t rejects[RT_REJECT_COUNT];
    _Atomic uint64_t completed;
    struct rt_metrics_litellm *litellm; /* LiteLLM's names for dashboards built for LiteLLM */
    rt_metrics_writer_fn writer;
    void *writer_ud;
};

struct rt_metrics *rt_metrics_create(const struct rt_config *cfg)
{
    struct rt_metrics *m = calloc(1, sizeof(*m));
    size_t g1;

    if (m == NULL)
        return NULL;
    m->cfg = cfg;
    m->groups = calloc(cfg->n_deployments + 1, sizeof(*m->groups));
    m->group_names = tg_names_create(cfg->n_deployments);
    m->dep_ids = tg_names_create(cfg->n_deployments);
    if (m->groups == NULL || m->group_names == NULL || m->dep_ids == NULL)
        goto fail;
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const char *g = cfg->deployments[i].group;

        if (tg_names_add(m->group_names, g, (int)m->ngroups) == 0)
            m->groups[m->ngroups++] = g;
        tg_names_add(m->dep_ids, cfg->deployments[i].id, (int)i); /* of two, the first */
    }
    g1 = m->ngroups + 1;
    m->ndeps = cfg->n_deployments;
    m->requests = calloc(g1 * N_STATUS, sizeof(*m->requests));
    m->retries = calloc(g1, sizeof(*m->retries));
    m->fallbacks = calloc(g1 * g1, sizeof(*m->fallbacks));
    m->duration = calloc(g1, sizeof(*m->duration));
    m->attempts = calloc(m->ndeps * RT_ERR_CLASSES + 1, sizeof(*m->attempts));
    m->cooldowns = calloc(m->ndeps + 1, sizeof(*m->cooldowns));
    m->unpriced = calloc(m->ndeps + 1, sizeof(*m->unpriced));
    m->litellm = rt_metrics_litellm_create(cfg);
    if (m->requests == NULL || m->retries == NULL || m->fallbacks == NULL || m->duration == NULL ||
        m->attempts == NULL || m->cooldowns == NULL || m->unpriced == NULL || m->litellm == NULL)
        goto fail;
    for (size_t i = 0; i < g1; i++)
        tg_histogram_init(&m->duration[i], tg_latency_bounds_s, tg_latency_bounds_n);
    tg_histogram_init(&m->overhead, tg_latency_bounds_s, tg_latency_bounds_n);
    return m;
fail:
    rt_metrics_destroy(&m);
    return NULL;
}

void rt_metrics_destroy(struct rt_metrics **mp)
{
    struct rt_metrics *m;

    if (mp == NULL || *mp == NULL)
        return;
    m = *mp;
    *mp = NULL;
    rt_metrics_litellm_destroy(&m->litellm);
    free(m->unpriced);
    free(m->cooldowns);
    free(m->attempts);
    free(m->duration);
    free(m->fallbacks);
    free(m->retries);
    free(m->requests);
    free(m->groups);
    tg_names_destroy(&m->group_names);
    tg_names_destroy(&m->dep_ids);
    free(m);
}

/* Index of a group name, or -1 (then the "" row is used). */
static int group_index(const struct rt_metrics *m, const char *group)
{
    int i;

    return tg_names_find(m->group_names, group, &i) ? i : -1;
}

static size_t group_row(const struct rt_metrics *m, const char *group)
{
    int i = group_index(m, group);

    return i < 0 ? m->ngroups : (size_t)i;
}

static int dep_index(const struct rt_metrics *m, const char *id)
{
    int i;

    return tg_names_find(m->dep_ids, id, &i) ? i : -1;
}

static size_t status_col(int status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++) {
        if (status_codes[i] == status)
            return i;
    }
    return N_STATUS - 1;
}

void rt_metrics_request(struct rt_metrics *m, const char *group, int status, double seconds)
{
    size_t row = group_row(m, group);

    atomic_fetch_add_explicit(&m->requests[row * N_STATUS + status_col(status)], 1,
                              memory_order_relaxed);
    tg_histogram_observe(&m->duration[row], seconds);
}

void rt_metrics_event(struct rt_metrics *m, const struct proto_event *ev)
{
    rt_metrics_litellm_request(m->litellm, ev, dep_index(m, ev->deployment_id));
}

void rt_metrics_attempt(struct rt_metrics *m, const struct rt_key *key, const char *deployment_id,
                        int http_status, enum rt_error_class o)
{
    int d = dep_index(m, deployment_id);

    rt_metrics_litellm_attempt(m->litellm, key, d, http_status, o);

    if (d < 0 || (unsigned)o >= RT_ERR_CLASSES)
        return;
    atomic_fetch_add_explicit(&m->attempts[(size_t)d * RT_ERR_CLASSES + o], 1,
                              memory_order_relaxed);
}

void rt_metrics_retry(struct rt_metrics *m, const char *group)
{
    atomic_fetch_add_explicit(&m->retries[group_row(m, group)], 1, memory_order_relaxed);
}

void rt_metrics_fallback(struct rt_metrics *m, const char *from, const char *to)
{
    size_t g1 = m->ngroups + 1;

    atomic_fetch_add_explicit(&m->fallbacks[group_row(m, from) * g1 + group_row(m, to)], 1,
                              memory_order_relaxed);
}

void rt_metrics_cooldown(struct rt_metrics *m, const char *deployment_id)
{
    int d = dep_index(m, deployment_id);

    if (d >= 0)
        atomic_fetch_add_explicit(&m->cooldowns[d], 1, memory_order_relaxed);
}

void rt_metrics_unpriced(struct rt_metrics *m, const char *deployment_id)
{
    int d = dep_index(m, deployment_id);

    if (d >= 0)
        atomic_fetch_add_explicit(&m->unpriced[d], 1, memory_order_relaxed);
}

void rt_metrics_overhead(struct rt_metrics *m, double seconds)
{
    tg_histogram_observe(&m->overhead, seconds);
}

void rt_metrics_in_flight_add(struct rt_metrics *m, int delta)
{
    atomic_fetch_add_explicit(&m->in_flight, delta, memory_order_relaxed);
}

int64_t rt_metrics_in_flight(const struct rt_metrics *m)
{
    return atomic_load_explicit(&((struct rt_metrics *)m)->in_flight, memory_order_relaxed);
}

void rt_metrics_reject(struct rt_metrics *m, enum rt_reject r)
{
    if ((unsigned)r < RT_REJECT_COUNT)
        atomic_fetch_add_explicit(&m->rejects[r], 1, memory_order_relaxed);
}

void rt_metrics_completed_hook(struct rt_metrics *m)
{
    atomic_fetch_add_explicit(&m->completed, 1, memory_order_relaxed);
}

uint64_t rt_metrics_completed(const struct rt_metrics *m)
{
    return atomic_load(&((struct rt_metrics *)m)->completed);
}

void rt_metrics_set_writer(struct rt_metrics *m, rt_metrics_writer_fn fn, void *ud)
{
    m->writer = fn;
    m->writer_ud = ud;
}

static const char *group_name(const struct rt_metrics *m, size_t row)
{
    return row < m->ngroups ? m->groups[row] : "";
}

void rt_metrics_write(struct rt_metrics *m, struct tg_buf *b)
{
    size_t g1 = m->ngroups + 1;
    char code[16];

    tg_prom_header(b, "tollgate_router_requests_total", "counter",
                   "Requests answered, by model group and HTTP status.");
    for (size_t g = 0; g < g1; g++) {
        for (size_t s = 0; s < N_STATUS; s++) {
            uint64_t v = atomic_load_explicit(&m->requests[g * N_STATUS + s], memory_order_relaxed);
            struct tg_label l[2];

            if (v == 0)
                continue;
            if (s < N_STATUS - 1)
                snprintf(code, sizeof(code), "%d", status_codes[s]);
            else
                snprintf(code, sizeof(code), "other");
            l[0] = (struct tg_label){"model_group", group_name(m, g)};
            l[1] = (struct tg_label){"status", code};
            tg_prom_sample_u64(b, "tollgate_router_requests_total", l, 2, v);
        }
    }
    tg_prom_header(b, "tollgate_router_attempts_total", "counter",
                   "Upstream attempts, by model group, deployment and outcome.");
    for (size_t d = 0; d < m->ndeps; d++) {
        for (size_t o = 0; o < RT_ERR_CLASSES; o++) {
            uint64_t v =
                atomic_load_explicit(&m->attempts[d * RT_ERR_CLASSES + o], memory_order_relaxed);
            struct tg_label l[3];

            if (v == 0)
                continue;
            l[0] = (struct tg_label){"model_group", m->cfg->deployments[d].group};
            l[1] = (struct tg_label){"deployment", m->cfg->deployments[d].id};
            l[2] = (struct tg_label){"outcome", outcome_names[o]};
            tg_prom_sample_u64(b, "tollgate_router_attempts_total", l, 3, v);
        }
    }
    tg_prom_header(b, "tollgate_router_retries_total", "counter", "Retries within a model group.");
    for (size_t g = 0; g < m->ngroups; g++) {
        struct tg_label l = {"model_group", group_name(m, g)};

        tg_prom_sample_u64(b, "tollgate_router_retries_total", &l, 1,
                           atomic_load_explicit(&m->retries[g], memory_order_relaxed));
    }
    tg_prom_header(b, "tollgate_router_fallbacks_total", "counter",
                   "Fallbacks from one model group to another.");
    for (size_t f = 0; f < g1; f++) {
        for (size_t t = 0; t < g1; t++) {
            uint64_t v = atomic_load_explicit(&m->fallbacks[f * g1 + t], memory_order_relaxed);
            struct tg_label l[2];

            if (v == 0)
                continue;
            l[0] = (struct tg_label){"from", group_name(m, f)};
            l[1] = (struct tg_label){"to", group_name(m, t)};
            tg_prom_sample_u64(b, "tollgate_router_fallbacks_total", l, 2, v);
        }
    }
    tg_prom_header(b, "tollgate_router_cooldowns_total", "counter", "Deployments put in cooldown.");
    for (size_t d = 0; d < m->ndeps; d++) {
        struct tg_label l = {"deployment", m->cfg->deployments[d].id};

        tg_prom_sample_u64(b, "tollgate_router_cooldowns_total", &l, 1,
                           atomic_load_explicit(&m->cooldowns[d], memory_order_relaxed));
    }
    tg_prom_header(b, "tollgate_router_unpriced_calls_total", "counter",
                   "Calls that used tokens of a deployment without a price (cost 0).");
    for (size_t d = 0; d < m->ndeps; d++) {
        struct tg_label l = {"deployment", m->cfg->deployments[d].id};

        tg_prom_sample_u64(b, "tollgate_router_unpriced_calls_total", &l, 1,
                           atomic_load_explicit(&m->unpriced[d], memory_order_relaxed));
    }
    tg_prom_header(b, "tollgate_router_request_duration_seconds", "histogram",
                   "Request duration from first byte received to response decided.");
    for (size_t g = 0; g < g1; g++) {
        struct tg_label l = {"model_group", group_name(m, g)};

        if (atomic_load(&m->duration[g].count) == 0)
            continue;
        tg_prom_histogram(b, "tollgate_router_request_duration_seconds", &l, 1, &m->duration[g]);
    }
    tg_prom_header(b, "tollgate_router_overhead_seconds", "histogram",
                   "Time spent in router-svc itself (request duration minus upstream time).");
    tg_prom_histogram(b, "tollgate_router_overhead_seconds", NULL, 0, &m->overhead);
    tg_prom_gauge(b, "tollgate_router_in_flight", "Requests in flight.",
                  (double)rt_metrics_in_flight(m));
    tg_prom_header(b, "tollgate_router_rejected_total", "counter",
                   "Requests refused before routing, by reason.");
    for (size_t r = 0; r < RT_REJECT_COUNT; r++) {
        struct tg_label l = {"reason", reject_names[r]};

        tg_prom_sample_u64(b, "tollgate_router_rejected_total", &l, 1,
                           atomic_load_explicit(&m->rejects[r], memory_order_relaxed));
    }
    tg_prom_counter(b, "tollgate_router_completions_total",
                    "Final outcomes handed to the completion hook.", rt_metrics_completed(m));
    rt_metrics_litellm_write(m->litellm, b);
    if (m->writer != NULL)
        m->writer(b, m->writer_ud);
}
