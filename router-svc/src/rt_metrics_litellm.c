#include "rt_metrics_litellm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_metrics.h"

#define OVERFLOW_HASH "__overflow__"

/* exception_status values with their own series; any other status is "other". */
static const int status_codes[] = {400, 401, 403, 404, 408, 413, 422, 429, 500, 502, 503, 504};
#define N_STATUS (sizeof(status_codes) / sizeof(status_codes[0]) + 1)

/* exception_class: the name of the exception LiteLLM raises for each error class (LiteLLM's
 * exception mapping, https://docs.litellm.ai/docs/exception_mapping). */
static const char *const exception_names[RT_ERR_CLASSES] = {
    [RT_ERR_NONE] = "",
    [RT_ERR_RATE_LIMIT] = "RateLimitError",
    [RT_ERR_SERVER] = "InternalServerError",
    [RT_ERR_TIMEOUT] = "Timeout",
    [RT_ERR_CONNECT] = "APIConnectionError",
    [RT_ERR_CONTEXT_WINDOW] = "ContextWindowExceededError",
    [RT_ERR_CONTENT_POLICY] = "ContentPolicyViolationError",
    [RT_ERR_BAD_REQUEST] = "BadRequestError",
    [RT_ERR_INVALID_RESPONSE] = "APIError",
    [RT_ERR_AUTH] = "AuthenticationError"};

/* litellm_deployment_latency_per_output_token's buckets: prometheus_client's defaults, which
 * LiteLLM's histogram keeps (seconds per token). */
static const double lpot_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                     0.5,   0.75, 1.0,   2.5,  5.0,   7.5, 10.0};

/* One label set: a key on a deployment. Labels are written once, before the set is published,
 * and never change. */
struct row {
    char hash[PROTO_KEY_HASH_CAP];
    char alias[PROTO_NAME_CAP];
    char team[PROTO_NAME_CAP];
    char user[PROTO_NAME_CAP];
    int dep;                      /* deployment index, -1 = none (refused before routing) */
    _Atomic uint64_t requests;    /* 2xx requests */
    _Atomic uint64_t spend_nusd;  /* cost, nano-USD */
    _Atomic uint64_t in_tokens;   /* prompt tokens */
    _Atomic uint64_t out_tokens;  /* completion tokens */
    _Atomic uint64_t dep_ok;      /* successful attempts */
    _Atomic uint64_t dep_total;   /* attempts */
    _Atomic uint64_t dep_fail[N_STATUS][RT_ERR_CLASSES]; /* failed attempts */
    struct tg_histogram lpot;     /* seconds per output token */
};

struct rt_metrics_litellm {
    const struct rt_config *cfg;
    size_t ndeps;
    struct row *rows;        /* RT_METRICS_LITELLM_KEY_SERIES, then ndeps + 1 overflow sets */
    _Atomic size_t used;     /* key sets published (release/acquire) */
    pthread_mutex_t add_mu;  /* taken to add a key set */
    _Atomic uint64_t overflow; /* observations folded into an overflow set */
};

static void row_init(struct row *r, const char *hash, const char *alias, const char *team,
                     const char *user, int dep)
{
    snprintf(r->hash, sizeof(r->hash), "%s", hash);
    snprintf(r->alias, sizeof(r->alias), "%s", alias);
    snprintf(r->team, sizeof(r->team), "%s", team);
    snprintf(r->user, sizeof(r->user), "%s", user);
    r->dep = dep;
    tg_histogram_init(&r->lpot, lpot_bounds, sizeof(lpot_bounds) / sizeof(lpot_bounds[0]));
}

struct rt_metrics_litellm *rt_metrics_litellm_create(const struct rt_config *cfg)
{
    struct rt_metrics_litellm *m = calloc(1, sizeof(*m));
    size_t nrows;

    if (m == NULL)
        return NULL;
    m->cfg = cfg;
    m->ndeps = cfg->n_deployments;
    nrows = RT_METRICS_LITELLM_KEY_SERIES + m->ndeps + 1;
    m->rows = calloc(nrows, sizeof(*m->rows));
    if (m->rows == NULL) {
        free(m);
        return NULL;
    }
    for (size_t d = 0; d <= m->ndeps; d++)
        row_init(&m->rows[RT_METRICS_LITELLM_KEY_SERIES + d], OVERFLOW_HASH, "", "", "",
                 d < m->ndeps ? (int)d : -1);
    pthread_mutex_init(&m->add_mu, NULL);
    return m;
}

void rt_metrics_litellm_destroy(struct rt_metrics_litellm **mp)
{
    struct rt_metrics_litellm *m;

    if (mp == NULL || *mp == NULL)
        return;
    m = *mp;
    *mp = NULL;
    pthread_mutex_destroy(&m->add_mu);
    free(m->rows);
    free(m);
}

/* dep as a deployment index of m: itself, or -1 (none, or not one of cfg's). */
static int dep_of(const struct rt_metrics_litellm *m, int dep)
{
    return dep >= 0 && (size_t)dep < m->ndeps ? dep : -1;
}

static int row_is(const struct row *r, const char *hash, const char *alias, const char *team,
                  const char *user, int dep)
{
    return r->dep == dep && strcmp(r->hash, hash) == 0 && strcmp(r->alias, alias) == 0 &&
           strcmp(r->team, team) == 0 && strcmp(r->user, user) == 0;
}

/* The set of (key, dep): found, added, or the deployment's overflow set. Never NULL. */
static struct row *row_get(struct rt_metrics_litellm *m, const char *hash, const char *alias,
                           const char *team, const char *user, int dep)
{
    size_t n = atomic_load_explicit(&m->used, memory_order_acquire);
    struct row *r = NULL;

    for (size_t i = 0; i < n; i++) {
        if (row_is(&m->rows[i], hash, alias, team, user, dep))
            return &m->rows[i];
    }
    if (n >= RT_METRICS_LITELLM_KEY_SERIES)
        goto overflow; /* full for good: no lock on the request path */
    pthread_mutex_lock(&m->add_mu);
    for (size_t i = n; i < atomic_load_explicit(&m->used, memory_order_relaxed); i++) {
        if (row_is(&m->rows[i], hash, alias, team, user, dep)) {
            r = &m->rows[i];
            break;
        }
    }
    if (r == NULL && atomic_load_explicit(&m->used, memory_order_relaxed) <
                         RT_METRICS_LITELLM_KEY_SERIES) {
        size_t i = atomic_load_explicit(&m->used, memory_order_relaxed);

        r = &m->rows[i];
        row_init(r, hash, alias, team, user, dep);
        atomic_store_explicit(&m->used, i + 1, memory_order_release);
    }
    pthread_mutex_unlock(&m->add_mu);
    if (r != NULL)
        return r;
overflow:
    atomic_fetch_add_explicit(&m->overflow, 1, memory_order_relaxed);
    return &m->rows[RT_METRICS_LITELLM_KEY_SERIES + (dep < 0 ? m->ndeps : (size_t)dep)];
}

static uint64_t nonneg(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

void rt_metrics_litellm_request(struct rt_metrics_litellm *m, const struct proto_event *ev,
                                int deployment)
{
    int dep = dep_of(m, deployment);
    struct row *r = row_get(m, ev->key_hash, ev->key_alias, ev->team_id, ev->user_id, dep);
    int ok = ev->status >= 200 && ev->status < 300;

    if (ok)
        atomic_fetch_add_explicit(&r->requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->spend_nusd, nonneg(ev->cost_nusd), memory_order_relaxed);
    atomic_fetch_add_explicit(&r->in_tokens, nonneg(ev->prompt_tokens), memory_order_relaxed);
    atomic_fetch_add_explicit(&r->out_tokens, nonneg(ev->completion_tokens), memory_order_relaxed);
    /* LiteLLM's figure: the call's time over its output tokens */
    if (ok && dep >= 0 && ev->completion_tokens > 0)
        tg_histogram_observe(&r->lpot, (double)nonneg(ev->latency_ms) / 1000.0 /
                                           (double)ev->completion_tokens);
}

static size_t status_col(int status)
{
    for (size_t i = 0; i < N_STATUS - 1; i++) {
        if (status_codes[i] == status)
            return i;
    }
    return N_STATUS - 1;
}

void rt_metrics_litellm_attempt(struct rt_metrics_litellm *m, const struct rt_key *key,
                                int deployment, int http_status, enum rt_error_class o)
{
    int dep = dep_of(m, deployment);
    struct row *r;

    if (dep < 0 || (unsigned)o >= RT_ERR_CLASSES)
        return;
    r = key != NULL ? row_get(m, key->hash, key->key_alias, key->team_id, key->user_id, dep)
                    : row_get(m, "", "", "", "", dep);
    atomic_fetch_add_explicit(&r->dep_total, 1, memory_order_relaxed);
    if (o == RT_ERR_NONE)
        atomic_fetch_add_explicit(&r->dep_ok, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&r->dep_fail[status_col(http_status)][o], 1,
                                  memory_order_relaxed);
}

/* ---- exposition ---- */

static uint64_t ld(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static const char *model_of(const struct rt_metrics_litellm *m, int dep)
{
    return dep >= 0 ? m->cfg->deployments[dep].model : "";
}

static const char *group_of(const struct rt_metrics_litellm *m, int dep)
{
    return dep >= 0 ? m->cfg->deployments[dep].group : "";
}

/* Per-request series have no deployment label: rows of one key whose deployments share the
 * label values (model, or requested_model and model) are one series, summed here. Returns 0
 * when an earlier row already wrote this one's series. */
static int first_of(struct row *const *rows, size_t i, const struct rt_metrics_litellm *m,
                    int by_group)
{
    const struct row *a = rows[i];

    for (size_t j = 0; j < i; j++) {
        const struct row *b = rows[j];

        if (row_is(b, a->hash, a->alias, a->team, a->user, b->dep) &&
            strcmp(model_of(m, a->dep), model_of(m, b->dep)) == 0 &&
            (!by_group || strcmp(group_of(m, a->dep), group_of(m, b->dep)) == 0))
            return 0;
    }
    return 1;
}

static uint64_t sum_of(struct row *const *rows, size_t n, size_t i,
                       const struct rt_metrics_litellm *m, int by_group, size_t field)
{
    const struct row *a = rows[i];
    uint64_t s = 0;

    for (size_t j = i; j < n; j++) {
        struct row *b = rows[j];

        if (row_is(b, a->hash, a->alias, a->team, a->user, b->dep) &&
            strcmp(model_of(m, a->dep), model_of(m, b->dep)) == 0 &&
            (!by_group || strcmp(group_of(m, a->dep), group_of(m, b->dep)) == 0))
            s += ld((_Atomic uint64_t *)((char *)b + field));
    }
    return s;
}

static void write_requests(struct rt_metrics_litellm *m, struct tg_buf *b, struct row **rows,
                           size_t n)
{
    /* 0: litellm_requests_metric (8 labels), 1: litellm_spend_metric (its first 7) */
    for (int s = 0; s < 2; s++) {
        if (s == 0)
            tg_prom_header(b, "litellm_requests_metric_total", "counter",
                           "LiteLLM's name: successful requests, by key and model.");
        else
            tg_prom_header(b, "litellm_spend_metric_total", "counter",
                           "LiteLLM's name: spend in USD, by key and model.");
        for (size_t i = 0; i < n; i++) {
            const struct row *r = rows[i];
            uint64_t v;
            struct tg_label l[8] = {{"end_user", ""},
                                    {"hashed_api_key", r->hash},
                                    {"api_key_alias", r->alias},
                                    {"model", model_of(m, r->dep)},
                                    {"team", r->team},
                                    {"team_alias", ""},
                                    {"user", r->user},
                                    {"user_email", ""}};

            if (!first_of(rows, i, m, 0))
                continue;
            v = sum_of(rows, n, i, m, 0,
                       s == 0 ? offsetof(struct row, requests) : offsetof(struct row, spend_nusd));
            if (v == 0)
                continue;
            if (s == 0)
                tg_prom_sample_u64(b, "litellm_requests_metric_total", l, 8, v);
            else
                tg_prom_sample(b, "litellm_spend_metric_total", l, 7, (double)v / 1e9);
        }
    }
}

static void write_tokens(struct rt_metrics_litellm *m, struct tg_buf *b, struct row **rows,
                         size_t n)
{
    static const struct {
        const char *name, *help;
    } series[3] = {
        {"litellm_total_tokens_total", "LiteLLM's name: input + output tokens."},
        {"litellm_input_tokens_total", "LiteLLM's name: input tokens."},
        {"litellm_output_tokens_total", "LiteLLM's name: output tokens."},
    };

    for (int s = 0; s < 3; s++) {
        tg_prom_header(b, series[s].name, "counter", series[s].help);
        for (size_t i = 0; i < n; i++) {
            const struct row *r = rows[i];
            uint64_t in, out, v;
            struct tg_label l[8] = {{"end_user", ""},
                                    {"hashed_api_key", r->hash},
                                    {"api_key_alias", r->alias},
                                    {"requested_model", group_of(m, r->dep)},
                                    {"team", r->team},
                                    {"team_alias", ""},
                                    {"user", r->user},
                                    {"model", model_of(m, r->dep)}};

            if (!first_of(rows, i, m, 1))
                continue;
            in = sum_of(rows, n, i, m, 1, offsetof(struct row, in_tokens));
            out = sum_of(rows, n, i, m, 1, offsetof(struct row, out_tokens));
            v = s == 0 ? in + out : s == 1 ? in : out;
            if (v > 0)
                tg_prom_sample_u64(b, series[s].name, l, 8, v);
        }
    }
}

/* The deployment labels of a row: requested_model, litellm_model_name, model_id, api_base,
 * api_provider, hashed_api_key, api_key_alias, team, team_alias (9). */
static void dep_labels(const struct rt_metrics_litellm *m, const struct row *r,
                       struct tg_label *l)
{
    const struct rt_deployment_conf *d = &m->cfg->deployments[r->dep];

    l[0] = (struct tg_label){"requested_model", d->group};
    l[1] = (struct tg_label){"litellm_model_name", d->model};
    l[2] = (struct tg_label){"model_id", d->id};
    l[3] = (struct tg_label){"api_base", d->api_base};
    l[4] = (struct tg_label){"api_provider", d->provider};
    l[5] = (struct tg_label){"hashed_api_key", r->hash};
    l[6] = (struct tg_label){"api_key_alias", r->alias};
    l[7] = (struct tg_label){"team", r->team};
    l[8] = (struct tg_label){"team_alias", ""};
}

static void write_deployments(struct rt_metrics_litellm *m, struct tg_buf *b, struct row **rows,
                              size_t n)
{
    struct tg_label l[11];
    char code[16];

    tg_prom_header(b, "litellm_deployment_success_responses_total", "counter",
                   "LiteLLM's name: successful upstream attempts, by deployment and key.");
    for (size_t i = 0; i < n; i++) {
        if (rows[i]->dep < 0 || ld(&rows[i]->dep_ok) == 0)
            continue;
        dep_labels(m, rows[i], l);
        tg_prom_sample_u64(b, "litellm_deployment_success_responses_total", l, 9,
                           ld(&rows[i]->dep_ok));
    }
    tg_prom_header(b, "litellm_deployment_total_requests_total", "counter",
                   "LiteLLM's name: upstream attempts (success + failure), by deployment and key.");
    for (size_t i = 0; i < n; i++) {
        if (rows[i]->dep < 0 || ld(&rows[i]->dep_total) == 0)
            continue;
        dep_labels(m, rows[i], l);
        tg_prom_sample_u64(b, "litellm_deployment_total_requests_total", l, 9,
                           ld(&rows[i]->dep_total));
    }
    tg_prom_header(b, "litellm_deployment_failure_responses_total", "counter",
                   "LiteLLM's name: failed upstream attempts, by deployment, key, status and "
                   "exception class.");
    for (size_t i = 0; i < n; i++) {
        if (rows[i]->dep < 0)
            continue;
        for (size_t s = 0; s < N_STATUS; s++) {
            for (size_t o = 1; o < RT_ERR_CLASSES; o++) {
                uint64_t v = ld(&rows[i]->dep_fail[s][o]);

                if (v == 0)
                    continue;
                if (s < N_STATUS - 1)
                    snprintf(code, sizeof(code), "%d", status_codes[s]);
                else
                    snprintf(code, sizeof(code), "other");
                dep_labels(m, rows[i], l);
                l[9] = (struct tg_label){"exception_status", code};
                l[10] = (struct tg_label){"exception_class", exception_names[o]};
                tg_prom_sample_u64(b, "litellm_deployment_failure_responses_total", l, 11, v);
            }
        }
    }
    tg_prom_header(b, "litellm_deployment_latency_per_output_token", "histogram",
                   "LiteLLM's name: request seconds per output token, by deployment and key.");
    for (size_t i = 0; i < n; i++) {
        if (rows[i]->dep < 0 || atomic_load(&rows[i]->lpot.count) == 0)
            continue;
        dep_labels(m, rows[i], l);
        /* LiteLLM's label set for this one has no requested_model */
        tg_prom_histogram(b, "litellm_deployment_latency_per_output_token", l + 1, 8,
                          &rows[i]->lpot);
    }
}

void rt_metrics_litellm_write(struct rt_metrics_litellm *m, struct tg_buf *b)
{
    size_t used = atomic_load_explicit(&m->used, memory_order_acquire);
    size_t n = 0;
    struct row **rows = malloc((used + m->ndeps + 1) * sizeof(*rows));

    if (rows == NULL)
        return;
    for (size_t i = 0; i < used; i++)
        rows[n++] = &m->rows[i];
    for (size_t d = 0; d <= m->ndeps; d++)
        rows[n++] = &m->rows[RT_METRICS_LITELLM_KEY_SERIES + d];
    write_requests(m, b, rows, n);
    write_tokens(m, b, rows, n);
    write_deployments(m, b, rows, n);
    tg_prom_counter(b, "tollgate_router_litellm_overflow_total",
                    "Observations counted in a LiteLLM series' overflow set (hashed_api_key "
                    "__overflow__): more (key, deployment) pairs than "
                    "RT_METRICS_LITELLM_KEY_SERIES.",
                    ld(&m->overflow));
    free(rows);
}
