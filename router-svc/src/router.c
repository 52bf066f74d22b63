#include "router.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mask.h"
#include "tg_err.h"
#include "tg_hash.h"
#include "tg_log.h"
#include "tg_str.h"

#define PLAN_MAGIC 0x52504c4eu /* "RPLN" */

enum list_kind { LIST_NONE = 0, LIST_GENERAL = 1, LIST_CONTEXT = 2, LIST_POLICY = 3 };

struct group {
    const char *name; /* borrowed from the config (first deployment's model_name) */
    uint32_t n;
    uint32_t deps[RT_GROUP_DEPLOYMENTS_MAX]; /* indexes in cfg->deployments */
};

struct dep_state {
    uint32_t in_flight;
    uint64_t cooldown_until_ms;
    uint64_t fail_window_start_ms;
    uint32_t fails;
    uint32_t latency_ewma_ms;
    uint64_t cooldowns;
};

struct rt_router {
    const struct rt_config *cfg;
    const struct rt_mask *mask;
    pthread_mutex_t lock; /* guards deps[] and lim; held for decisions only, never during I/O */
    uint32_t n_groups;
    struct group *groups;
    struct tg_names *group_names;  /* group name -> index */
    struct tg_names *alias_names;  /* the config's aliases -> their group's index (or -1) */
    struct dep_state *deps;
    struct rt_limiter *lim;
    struct rt_teams *teams; /* borrowed, may be NULL */
};

void rt_router_set_teams(struct rt_router *router, struct rt_teams *teams)
{
    router->teams = teams;
}

/* ---- classification ---- */

const char *rt_error_class_name(enum rt_error_class c)
{
    switch (c) {
    case RT_ERR_NONE:
        return "";
    case RT_ERR_RATE_LIMIT:
        return "rate_limit";
    case RT_ERR_SERVER:
        return "server_error";
    case RT_ERR_TIMEOUT:
        return "timeout";
    case RT_ERR_CONNECT:
        return "connect";
    case RT_ERR_CONTEXT_WINDOW:
        return "context_window";
    case RT_ERR_CONTENT_POLICY:
        return "content_policy";
    case RT_ERR_BAD_REQUEST:
        return "bad_request";
    case RT_ERR_INVALID_RESPONSE:
        return "invalid_response";
    case RT_ERR_AUTH:
        return "auth";
    }
    return "unknown";
}

static int body_has(const char *body, size_t len, const char *needle)
{
    size_t n = strlen(needle);

    if (body == NULL || len < n)
        return 0;
    for (size_t i = 0; i + n <= len; i++) {
        if (strncasecmp(body + i, needle, n) == 0)
            return 1;
    }
    return 0;
}

enum rt_error_class rt_router_classify(int http_status, const char *body, size_t len)
{
    if (http_status >= 200 && http_status < 300)
        return RT_ERR_NONE;
    if (http_status == 429)
        return RT_ERR_RATE_LIMIT;
    if (http_status >= 500)
        return RT_ERR_SERVER;
    if (http_status == 400 || http_status == 413 || http_status == 422) {
        if (body_has(body, len, "context_length_exceeded") ||
            body_has(body, len, "context length") || body_has(body, len, "prompt is too long") ||
            body_has(body, len, "maximum context"))
            return RT_ERR_CONTEXT_WINDOW;
        if (body_has(body, len, "content_policy_violation") ||
            body_has(body, len, "content management policy") ||
            body_has(body, len, "content_filter"))
            return RT_ERR_CONTENT_POLICY;
    }
    if (http_status == 401 || http_status == 403)
        return RT_ERR_AUTH;
    if (http_status >= 400)
        return RT_ERR_BAD_REQUEST;
    return RT_ERR_INVALID_RESPONSE; /* 1xx/3xx as a final answer: unusable */
}

static int is_retryable(enum rt_error_class c)
{
    return c == RT_ERR_RATE_LIMIT || c == RT_ERR_SERVER || c == RT_ERR_TIMEOUT ||
           c == RT_ERR_CONNECT || c == RT_ERR_INVALID_RESPONSE;
}

/* ---- create / destroy ---- */

static int group_index(const struct rt_router *r, const char *name)
{
    int g;

    return tg_names_find(r->group_names, name, &g) ? g : -1;
}

struct rt_router *rt_router_create(const struct rt_config *cfg, const struct rt_mask *mask,
                                   char *err, size_t errlen)
{
    struct rt_router *r = NULL;
    char lerr[256];

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto nomem;
    r->cfg = cfg;
    r->mask = mask;
    {
        /* short critical sections taken by every loop thread: spin briefly before sleeping */
        pthread_mutexattr_t ma;

        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
        pthread_mutex_init(&r->lock, &ma);
        pthread_mutexattr_destroy(&ma);
    }
    r->groups = calloc(cfg->n_deployments > 0 ? cfg->n_deployments : 1, sizeof(*r->groups));
    r->deps = calloc(cfg->n_deployments > 0 ? cfg->n_deployments : 1, sizeof(*r->deps));
    r->group_names = tg_names_create(cfg->n_deployments);
    r->alias_names = tg_names_create(cfg->n_aliases);
    if (r->groups == NULL || r->deps == NULL || r->group_names == NULL || r->alias_names == NULL)
        goto nomem;
    for (uint32_t i = 0; i < cfg->n_deployments; i++) {
        const struct rt_deployment_conf *d = &cfg->deployments[i];
        int g = group_index(r, d->group);

        if (g < 0) {
            g = (int)r->n_groups++;
            r->groups[g].name = d->group;
            tg_names_add(r->group_names, d->group, g); /* (room for every deployment's group) */
        }
        if (r->groups[g].n >= RT_GROUP_DEPLOYMENTS_MAX) {
            snprintf(err, errlen, "model group %s has more than %d deployments", d->group,
                     RT_GROUP_DEPLOYMENTS_MAX);
            goto fail;
        }
        r->groups[g].deps[r->groups[g].n++] = i;
    }
    r->lim = rt_limiter_create(cfg->n_deployments, cfg->limiter_keys > 0 ? cfg->limiter_keys : 1,
                               lerr, sizeof(lerr));
    if (r->lim == NULL) {
        snprintf(err, errlen, "%s", lerr);
        goto fail;
    }
    for (uint32_t i = 0; i < cfg->n_deployments; i++)
        rt_limiter_set_deployment(r->lim, i, cfg->deployments[i].rpm, cfg->deployments[i].tpm);
    /* an alias names its group (or none there is: -1); of two with one name, the first holds */
    for (uint32_t i = 0; i < cfg->n_aliases; i++)
        tg_names_add(r->alias_names, cfg->aliases[i].alias, group_index(r, cfg->aliases[i].group));
    return r;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    rt_router_destroy(&r);
    return NULL;
}

void rt_router_destroy(struct rt_router **router)
{
    struct rt_router *r;

    if (router == NULL || *router == NULL)
        return;
    r = *router;
    rt_limiter_destroy(&r->lim);
    pthread_mutex_destroy(&r->lock);
    tg_names_destroy(&r->alias_names);
    tg_names_destroy(&r->group_names);
    free(r->groups);
    free(r->deps);
    free(r);
    *router = NULL;
}

/* ---- resolution ---- */

static int resolve_index(const struct rt_router *r, const struct rt_key *key, const char *model)
{
    if (key != NULL) {
        for (uint32_t i = 0; i < key->n_aliases; i++) {
            if (strcmp(key->aliases[i].alias, model) == 0)
                return group_index(r, key->aliases[i].group);
        }
    }
    {
        int g;

        if (tg_names_find(r->alias_names, model, &g))
            return g;
    }
    return group_index(r, model);
}

/* ---- plan helpers ---- */

static uint64_t rng_next(struct rt_plan *p)
{
    uint64_t x = p->rng;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p->rng = x;
    return x;
}

static void outcome_msg(struct rt_router *r, struct rt_plan *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Router-made message, masked (it may quote what the client sent). */
static void outcome_msg(struct rt_router *r, struct rt_plan *p, const char *fmt, ...)
{
    char raw[RT_OUTCOME_MESSAGE_CAP];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(raw))
        n = (int)sizeof(raw) - 1;
    rt_mask_apply(r->mask, raw, (size_t)n, p->outcome.message, sizeof(p->outcome.message));
}

static void reject(struct rt_router *r, struct rt_plan *p, int status, const char *cls,
                   uint32_t retry_after_s)
{
    (void)r;
    p->outcome.status = status;
    snprintf(p->outcome.error_class, sizeof(p->outcome.error_class), "%s", cls);
    p->outcome.retry_after_s = retry_after_s;
    p->outcome.from_upstream = 0;
    p->outcome.served = 0;
    p->done = 1;
}

static int group_done(const struct rt_plan *p, int g)
{
    for (uint32_t i = 0; i < p->n_groups_done; i++) {
        if (p->groups_done[i] == g)
            return 1;
    }
    return 0;
}

static const char *limit_kind_name(enum rt_limit_kind k)
{
    switch (k) {
    case RT_LIMIT_KIND_RPM:
        return "rpm";
    case RT_LIMIT_KIND_TPM:
        return "tpm";
    case RT_LIMIT_KIND_PARALLEL:
        return "max_parallel_requests";
    }
    return "limit";
}

static void note_limited(struct rt_plan *p, uint32_t retry_after_s)
{
    if (retry_after_s < 1)
        retry_after_s = 1;
    if (!p->limited || retry_after_s < p->limited_retry_after_s)
        p->limited_retry_after_s = retry_after_s;
    p->limited = 1;
}

/* The key's per-group limit (model_rpm_limit / model_tpm_limit) for group g: the entry naming
 * the group, else an entry naming an alias (the key's or the global) that resolves to it. A
 * limit is on the group, whichever name the client or a fallback list uses for it. */
static const struct rt_key_group_limit *key_group_limit(const struct rt_router *r,
                                                        const struct rt_key *key, int g)
{
    if (key == NULL)
        return NULL;
    for (uint32_t i = 0; i < key->n_group_limits; i++) {
        const struct rt_key_group_limit *l = &key->group_limits[i];

        if ((l->rpm >= 0 || l->tpm >= 0) && strcmp(l->group, r->groups[g].name) == 0)
            return l;
    }
    for (uint32_t i = 0; i < key->n_group_limits; i++) {
        const struct rt_key_group_limit *l = &key->group_limits[i];

        if ((l->rpm >= 0 || l->tpm >= 0) && resolve_index(r, key, l->group) == g)
            return l;
    }
    return NULL;
}

/* 1 when the key may use group g as a fallback: its models list is empty, names the group, or
 * names an alias (the key's or the global) that resolves to it; the same names that admit a
 * request for the group itself. */
static int key_allows_group(const struct rt_router *r, const struct rt_key *key, int g)
{
    if (key == NULL || rt_key_allows(key, r->groups[g].name))
        return 1;
    for (uint32_t i = 0; i < key->n_models; i++) {
        if (resolve_index(r, key, key->models[i]) == g)
            return 1;
    }
    return 0;
}

/* Fallback targets of the requested group for a list kind. */
static void load_list(struct rt_router *r, struct rt_plan *p, int kind)
{
    const struct rt_config *cfg = r->cfg;
    const char *name = r->groups[p->req_group].name;
    const char *targets[RT_FALLBACK_TARGETS_MAX];
    uint32_t n = 0;
    const struct rt_fallback_rule *rules = NULL;
    uint32_t n_rules = 0;

    p->list_kind = kind;
    p->n_list = 0;
    p->list_pos = 0;
    if (p->disable_fallbacks)
        return;
    if (kind == LIST_GENERAL && p->key != NULL && p->key->has_fallbacks) {
        /* Key-level list replaces the global one entirely (`[]` = none). */
        for (uint32_t i = 0; i < p->key->n_fallbacks; i++) {
            if (strcmp(p->key->fallbacks[i].group, name) != 0)
                continue;
            for (uint32_t j = 0; j < p->key->fallbacks[i].n_targets && n < RT_FALLBACK_TARGETS_MAX;
                 j++)
                targets[n++] = p->key->fallbacks[i].targets[j];
        }
    } else {
        if (kind == LIST_GENERAL) {
            rules = cfg->fallbacks;
            n_rules = cfg->n_fallbacks;
        } else if (kind == LIST_CONTEXT) {
            rules = cfg->cw_fallbacks;
            n_rules = cfg->n_cw_fallbacks;
        } else if (kind == LIST_POLICY) {
            rules = cfg->cp_fallbacks;
            n_rules = cfg->n_cp_fallbacks;
        }
        for (uint32_t i = 0; i < n_rules; i++) {
            if (strcmp(rules[i].group, name) != 0)
                continue;
            for (uint32_t j = 0; j < rules[i].n_targets && n < RT_FALLBACK_TARGETS_MAX; j++)
                targets[n++] = rules[i].targets[j];
            break;
        }
        if (kind == LIST_GENERAL && n == 0) {
            for (uint32_t j = 0; j < cfg->n_default_fallbacks; j++)
                targets[n++] = cfg->default_fallbacks[j];
        }
    }
    for (uint32_t i = 0; i < n && p->n_list < RT_PLAN_GROUPS_MAX; i++) {
        int g = resolve_index(r, p->key, targets[i]);

        if (g < 0 || g == p->req_group)
            continue;
        p->list[p->n_list++] = g;
    }
}

/* Enter group g (requested or fallback). */
static void enter_group(struct rt_plan *p, int g)
{
    p->cur_group = g;
    p->group_attempts = 0;
    p->tried_mask = 0;
    if (p->n_groups_done < RT_PLAN_GROUPS_MAX)
        p->groups_done[p->n_groups_done++] = g;
}

/* Next fallback group from the loaded list, or -1. */
static int pop_fallback(struct rt_router *r, struct rt_plan *p)
{
    while (p->list_pos < p->n_list) {
        int g = p->list[p->list_pos++];

        if (group_done(p, g) || p->n_groups_done >= RT_PLAN_GROUPS_MAX)
            continue;
        if (r->cfg->enforce_fallback_model_access && !key_allows_group(r, p->key, g))
            continue;
        return g;
    }
    return -1;
}

/* ---- deployment choice ---- */

static int dep_available(struct rt_router *r, struct rt_plan *p, uint32_t di, uint64_t now_ms,
                         int is_requested, int *first_blocked, struct rt_limit_status *first_st,
                         int64_t *limit_sum)
{
    struct dep_state *ds = &r->deps[di];
    struct rt_limit_status st;

    if (ds->cooldown_until_ms != 0) {
        if (now_ms < ds->cooldown_until_ms) {
            note_limited(p, (uint32_t)((ds->cooldown_until_ms - now_ms + 999) / 1000));
            return 0;
        }
        ds->cooldown_until_ms = 0; /* expired: a fresh count */
        ds->fails = 0;
        ds->fail_window_start_ms = 0;
    }
    if (rt_limiter_deployment_check(r->lim, di, now_ms, &st) != 0) {
        note_limited(p, st.retry_after_s);
        if (is_requested) {
            if (!*first_blocked) {
                *first_blocked = 1;
                *first_st = st;
                *limit_sum = st.limit;
            } else if (st.kind == first_st->kind) {
                *limit_sum += st.limit;
            }
        }
        return 0;
    }
    return 1;
}

/* router_settings.enable_pre_call_checks: the request does not fit deployment di. */
static int too_long(const struct rt_router *r, struct rt_plan *p, uint32_t di)
{
    int64_t max = r->cfg->deployments[di].price.max_input_tokens;

    if (!r->cfg->enable_pre_call_checks || p->input_tokens <= 0 || max <= 0 ||
        p->input_tokens <= max)
        return 0;
    if (max > p->too_long_max)
        p->too_long_max = max;
    return 1;
}

void rt_router_set_input_tokens(struct rt_plan *plan, int64_t tokens)
{
    plan->input_tokens = tokens > 0 ? tokens : 0;
}

/* Pick a deployment of group g, or -1 when none is available. */
static int pick(struct rt_router *r, struct rt_plan *p, int g, uint64_t now_ms)
{
    const struct group *grp = &r->groups[g];
    uint32_t cand[RT_GROUP_DEPLOYMENTS_MAX], pos[RT_GROUP_DEPLOYMENTS_MAX];
    uint32_t n = 0, n_untried = 0, best_order = UINT32_MAX;
    int is_requested = g == p->req_group;
    int first_blocked = 0;
    struct rt_limit_status first_st;
    int64_t limit_sum = 0;
    uint32_t pool[RT_GROUP_DEPLOYMENTS_MAX], n_pool = 0;
    const struct rt_config *cfg = r->cfg;

    uint32_t n_too_long = 0;

    memset(&first_st, 0, sizeof(first_st));
    for (uint32_t i = 0; i < grp->n; i++) {
        uint32_t di = grp->deps[i];

        if (too_long(r, p, di)) {
            n_too_long++;
            continue;
        }
        if (!dep_available(r, p, di, now_ms, is_requested, &first_blocked, &first_st, &limit_sum))
            continue;
        cand[n] = di;
        pos[n] = i;
        n++;
        if (!(p->tried_mask & (1ull << i)))
            n_untried++;
    }
    p->group_too_long = n == 0 && n_too_long == grp->n && grp->n > 0;
    if (n == 0 && p->group_too_long)
        return -1;
    if (n == 0) {
        if (is_requested && !p->requested_limited) {
            p->requested_limited = 1;
            if (first_blocked)
                snprintf(p->limited_msg, sizeof(p->limited_msg),
                         "Model capacity reached for %s: %s limit %lld, remaining 0", p->requested,
                         limit_kind_name(first_st.kind), (long long)limit_sum);
            else
                snprintf(p->limited_msg, sizeof(p->limited_msg),
                         "No deployments available for %s: every deployment is cooling down",
                         p->requested);
        }
        return -1;
    }
    /* Retries prefer deployments not tried yet in this group. */
    for (uint32_t i = 0; i < n; i++) {
        const struct rt_deployment_conf *d = &cfg->deployments[cand[i]];
        uint32_t order = d->order > 0 ? (uint32_t)d->order : UINT32_MAX;

        if (n_untried > 0 && (p->tried_mask & (1ull << pos[i])))
            continue;
        if (order < best_order) {
            best_order = order;
            n_pool = 0;
        }
        if (order == best_order)
            pool[n_pool++] = cand[i];
    }
    switch (cfg->routing_strategy) {
    case RT_STRATEGY_LEAST_BUSY: {
        uint32_t best = UINT32_MAX, ties = 0, chosen = pool[0];

        for (uint32_t i = 0; i < n_pool; i++) {
            uint32_t f = r->deps[pool[i]].in_flight;

            if (f < best) {
                best = f;
                ties = 0;
            }
            if (f == best) {
                ties++;
                if (rng_next(p) % ties == 0)
                    chosen = pool[i];
            }
        }
        return (int)chosen;
    }
    case RT_STRATEGY_LATENCY: {
        uint32_t best = UINT32_MAX, chosen = pool[0], ties = 0;

        for (uint32_t i = 0; i < n_pool; i++) {
            uint32_t l = r->deps[pool[i]].latency_ewma_ms; /* 0 = unknown: try it first */

            if (l < best) {
                best = l;
                ties = 0;
            }
            if (l == best) {
                ties++;
                if (rng_next(p) % ties == 0)
                    chosen = pool[i];
            }
        }
        return (int)chosen;
    }
    case RT_STRATEGY_SIMPLE_SHUFFLE:
    default: {
        uint64_t total = 0, x;

        for (uint32_t i = 0; i < n_pool; i++)
            total += cfg->deployments[pool[i]].weight;
        if (total == 0)
            return (int)pool[rng_next(p) % n_pool];
        x = rng_next(p) % total;
        for (uint32_t i = 0; i < n_pool; i++) {
            uint64_t w = cfg->deployments[pool[i]].weight;

            if (x < w)
                return (int)pool[i];
            x -= w;
        }
        return (int)pool[n_pool - 1];
    }
    }
}

static uint32_t pos_in_group(const struct rt_router *r, int g, uint32_t di)
{
    for (uint32_t i = 0; i < r->groups[g].n; i++) {
        if (r->groups[g].deps[i] == di)
            return i;
    }
    return 0;
}

/* ---- the request API ---- */

/* The limits of the key's team (key->team_id names it): the team's block, its models (the key
 * may use only what both allow) and its rpm/tpm/parallel limits, counted under the team's
 * subject. Returns 0 (p->has_team set when the team is known and has a limit to count), or
 * non-zero with the plan rejected (401 team blocked or model not allowed, 429 team limit). */
static int team_begin(struct rt_router *r, struct rt_plan *p, const struct rt_key *key,
                      const char *model, int g, uint64_t now_ms)
{
    struct rt_teams_table *t = rt_teams_acquire(r->teams);
    const struct rt_team_spec *team = rt_teams_lookup(t, key->team_id);
    struct rt_limit_status st;
    int rc = 0;

    if (team == NULL)
        goto out; /* not (yet) known here: the key's own limits apply */
    if (team->blocked) {
        outcome_msg(r, p, "Team is blocked (team_id=%s); an admin's /team/unblock lifts it",
                    team->team_id);
        reject(r, p, 401, "team_blocked", 0);
        rc = TG_EDENIED;
        goto out;
    }
    if (!rt_team_allows(team, model) && !rt_team_allows(team, r->groups[g].name)) {
        outcome_msg(r, p, "Team not allowed to access model=%s (team_id=%s)", p->requested,
                    team->team_id);
        reject(r, p, 401, "team_model_not_allowed", 0);
        rc = TG_EDENIED;
        goto out;
    }
    if (team->rpm_limit < 0 && team->tpm_limit < 0 && team->max_parallel_requests < 0)
        goto out;
    if (rt_limiter_team_subject(team->team_id, p->team_subject) != 0)
        goto out;
    pthread_mutex_lock(&r->lock);
    if (rt_limiter_key_check(r->lim, p->team_subject, NULL, team->rpm_limit, team->tpm_limit,
                             now_ms, &st) != 0) {
        rc = TG_ELIMIT;
    } else {
        int pr = rt_limiter_key_parallel_acquire(r->lim, p->team_subject,
                                                 team->max_parallel_requests, &st);

        if (pr == TG_ELIMIT)
            rc = TG_ELIMIT;
        else
            p->team_parallel_held = pr == 0;
    }
    if (rc == 0 && (team->rpm_limit >= 0 || team->tpm_limit >= 0))
        rt_limiter_key_admit(r->lim, p->team_subject, NULL, now_ms);
    pthread_mutex_unlock(&r->lock);
    if (rc != 0) {
        outcome_msg(r, p,
                    "Rate limit reached for team_id=%s: team %s limit %lld, remaining %lld",
                    team->team_id, limit_kind_name(st.kind), (long long)st.limit,
                    (long long)st.remaining);
        reject(r, p, 429, "rate_limit", st.retry_after_s);
        goto out;
    }
    p->has_team = 1;
    p->team_tpm = team->tpm_limit;
out:
    rt_teams_release(&t);
    return rc;
}

/* The key's own limit refused the request after its team's counted it: give back the team's
 * parallel slot (the rpm admission stays counted, as a key's does when a later check fails). */
static void team_undo(struct rt_router *r, struct rt_plan *p)
{
    if (!p->team_parallel_held)
        return;
    pthread_mutex_lock(&r->lock);
    rt_limiter_key_parallel_release(r->lim, p->team_subject);
    pthread_mutex_unlock(&r->lock);
    p->team_parallel_held = 0;
}

_Static_assert(offsetof(struct rt_plan, trail) + sizeof(struct rt_trail) == sizeof(struct rt_plan),
               "the trail is the plan's last member (rt_router_begin)");

int rt_router_begin(struct rt_router *router, const struct rt_key *key, const char *model,
                    int disable_fallbacks, uint64_t rnd, uint64_t now_ms, struct rt_plan *plan)
{
    struct rt_router *r = router;
    struct rt_plan *p = plan;
    struct rt_limit_status st;
    int g;

    memset(p, 0, offsetof(struct rt_plan, trail)); /* the trail (last, 1.6 KiB): its init */
    p->magic = PLAN_MAGIC;
    p->key = key;
    p->req_group = -1;
    p->cur_group = -1;
    p->in_flight_dep = -1;
    p->last_dep = -1;
    p->last_group = -1;
    p->outcome.dep_index = -1;
    p->rng = rnd ^ 0x9E3779B97F4A7C15ull;
    if (p->rng == 0)
        p->rng = 0x2545F4914F6CDD1Dull;
    rt_trail_init(&p->trail);
    if (model == NULL)
        model = "";
    if (strlen(model) >= sizeof(p->requested)) {
        proto_str_set(p->requested, sizeof(p->requested), model);
        outcome_msg(r, p, "Invalid model name passed in model=%s", p->requested);
        reject(r, p, 400, "invalid_model", 0);
        return TG_ENOTFOUND;
    }
    tg_strcpy_cap(p->requested, sizeof(p->requested), model);
    g = resolve_index(r, key, model);
    if (g < 0) {
        outcome_msg(r, p, "Invalid model name passed in model=%s", p->requested);
        reject(r, p, 400, "invalid_model", 0);
        return TG_ENOTFOUND;
    }
    p->req_group = g;
    if (key != NULL && !rt_key_allows(key, model) && !rt_key_allows(key, r->groups[g].name)) {
        outcome_msg(r, p, "API key not allowed to access model=%s", p->requested);
        reject(r, p, 401, "model_not_allowed", 0);
        return TG_EDENIED;
    }
    if (key != NULL && key->blocked) {
        outcome_msg(r, p, "Budget has been exceeded for this key");
        reject(r, p, 429, "budget_exceeded", 0);
        return TG_ELIMIT;
    }
    if (key != NULL && key->team_id[0] != '\0' && r->teams != NULL &&
        team_begin(r, p, key, model, g, now_ms) != 0)
        return p->outcome.status == 429 ? TG_ELIMIT : TG_EDENIED;
    p->num_retries = key != NULL && key->num_retries >= 0 ? key->num_retries : r->cfg->num_retries;
    p->disable_fallbacks = disable_fallbacks || (key != NULL && key->disable_fallbacks);
    /* a key without a limit of its own has nothing to count here (the limiter would return at
     * once): the lock is skipped */
    if (key != NULL &&
        (key->rpm_limit >= 0 || key->tpm_limit >= 0 || key->max_parallel_requests >= 0)) {
        int rc = 0;

        pthread_mutex_lock(&r->lock);
        if (rt_limiter_key_check(r->lim, key->hash, NULL, key->rpm_limit, key->tpm_limit, now_ms,
                                 &st) != 0) {
            rc = TG_ELIMIT;
        } else {
            int pr =
                rt_limiter_key_parallel_acquire(r->lim, key->hash, key->max_parallel_requests, &st);

            if (pr == TG_ELIMIT)
                rc = TG_ELIMIT;
            else
                p->key_parallel_held = pr == 0;
        }
        if (rc == 0 && (key->rpm_limit >= 0 || key->tpm_limit >= 0))
            rt_limiter_key_admit(r->lim, key->hash, NULL, now_ms);
        pthread_mutex_unlock(&r->lock);
        if (rc != 0) {
            team_undo(r, p);
            outcome_msg(r, p, "Rate limit reached for this key: %s limit %lld, remaining %lld",
                        limit_kind_name(st.kind), (long long)st.limit, (long long)st.remaining);
            reject(r, p, 429, "rate_limit", st.retry_after_s);
            return TG_ELIMIT;
        }
    }
    enter_group(p, g);
    return 0;
}

/* A final 429 always carries retry-after (>= 1): the provider's when its 429 had one, else the
 * earliest time an option skipped for limits or cooldown frees, else router_settings.retry_after
 * (at least 1 s). Without it a client of a provider 429 would have no wait to honour. */
static void final_retry_after(const struct rt_router *r, struct rt_plan *p)
{
    if (p->outcome.status != 429 || p->outcome.retry_after_s > 0)
        return;
    if (p->limited)
        p->outcome.retry_after_s = p->limited_retry_after_s;
    else
        p->outcome.retry_after_s = r->cfg->retry_after_s > 0 ? r->cfg->retry_after_s : 1;
}

/* Make the outcome final when nothing more can be tried. */
static void finalize(struct rt_router *r, struct rt_plan *p)
{
    p->done = 1;
    p->cur_group = -1;
    if (p->attempts > 0) {
        final_retry_after(r, p); /* the last attempt's outcome stands */
        return;
    }
    if (p->requested_limited || p->limited) {
        outcome_msg(r, p, "%s",
                    p->limited_msg[0] != '\0' ? p->limited_msg : "No deployments available");
        reject(r, p, 429, "rate_limit", p->limited_retry_after_s);
        return;
    }
    if (p->too_long_max > 0) {
        outcome_msg(r, p,
                    "This request has about %lld input tokens, more than the %lld any deployment "
                    "of %s takes (router_settings.enable_pre_call_checks)",
                    (long long)p->input_tokens, (long long)p->too_long_max, p->requested);
        reject(r, p, 400, "context_length_exceeded", 0); /* OpenAI's code */
        return;
    }
    outcome_msg(r, p, "No deployments available for %s", p->requested);
    reject(r, p, 429, "rate_limit", 1);
}

int rt_router_next(struct rt_router *router, struct rt_plan *plan, uint64_t now_ms,
                   struct rt_target *out)
{
    struct rt_router *r = router;
    struct rt_plan *p = plan;
    int handed = 0;

    if (p->magic != PLAN_MAGIC || p->done || p->in_flight_dep >= 0)
        return 0;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        int g = p->cur_group;

        if (g >= 0 && p->attempts < RT_PLAN_ATTEMPTS_MAX &&
            p->group_attempts < 1 + (uint32_t)p->num_retries) {
            const struct rt_key_group_limit *kl = NULL;
            int di = -1;
            int key_ok = 1;

            if (p->group_attempts == 0 && p->key != NULL) {
                struct rt_limit_status st;

                kl = key_group_limit(r, p->key, g);
                if (kl != NULL && rt_limiter_key_check(r->lim, p->key->hash, r->groups[g].name,
                                                       kl->rpm, kl->tpm, now_ms, &st) != 0) {
                    key_ok = 0;
                    note_limited(p, st.retry_after_s);
                    if (g == p->req_group && !p->requested_limited) {
                        p->requested_limited = 1;
                        snprintf(p->limited_msg, sizeof(p->limited_msg),
                                 "Rate limit reached for %s: model_%s_limit %lld, remaining 0",
                                 p->requested, limit_kind_name(st.kind), (long long)st.limit);
                    }
                }
            }
            if (key_ok)
                di = pick(r, p, g, now_ms);
            if (di >= 0) {
                const struct rt_deployment_conf *d = &r->cfg->deployments[di];

                rt_limiter_deployment_admit(r->lim, (uint32_t)di, now_ms);
                if (p->group_attempts == 0 && kl != NULL)
                    rt_limiter_key_admit(r->lim, p->key->hash, r->groups[g].name, now_ms);
                r->deps[di].in_flight++;
                p->in_flight_dep = di;
                p->tried_mask |= 1ull << pos_in_group(r, g, (uint32_t)di);
                p->attempts++;
                out->dep = d;
                out->group = r->groups[g].name;
                out->dep_index = (uint32_t)di;
                out->attempt = p->attempts;
                out->is_retry = p->group_attempts > 0;
                out->is_fallback = g != p->req_group;
                if (p->group_attempts == 0 && g != p->req_group)
                    p->fallbacks++; /* counted when a fallback group is actually tried */
                p->group_attempts++;
                handed = 1;
                break;
            }
        }
        /* Leave the current group: next fallback group, or the end. */
        p->cur_group = -1;
        if (p->attempts >= RT_PLAN_ATTEMPTS_MAX) {
            finalize(r, p);
            break;
        }
        if (p->list_kind == LIST_NONE)
            load_list(r, p, p->group_too_long ? LIST_CONTEXT : LIST_GENERAL);
        p->group_too_long = 0;
        g = pop_fallback(r, p);
        if (g < 0) {
            finalize(r, p);
            break;
        }
        enter_group(p, g);
    }
    pthread_mutex_unlock(&r->lock);
    return handed;
}

enum rt_step rt_router_report(struct rt_router *router, struct rt_plan *plan,
                              const struct rt_target *target, const struct rt_result *res,
                              uint64_t now_ms, int *cooled_down)
{
    struct rt_router *r = router;
    struct rt_plan *p = plan;
    uint32_t di = target->dep_index;
    struct dep_state *ds;
    const struct rt_deployment_conf *d;
    enum rt_error_class c = res->error_class;
    enum rt_step step = RT_STEP_DONE;
    int32_t status = res->http_status;

    if (cooled_down != NULL)
        *cooled_down = 0;
    if (p->magic != PLAN_MAGIC || p->in_flight_dep < 0 || (uint32_t)p->in_flight_dep != di ||
        di >= r->cfg->n_deployments)
        return RT_STEP_DONE; /* programmer error: nothing was handed out for this target */
    d = &r->cfg->deployments[di];
    rt_trail_add(&p->trail, r->mask, target->group, d->id, res->http_status, rt_error_class_name(c),
                 res->latency_ms, res->message, res->message_len);

    pthread_mutex_lock(&r->lock);
    ds = &r->deps[di];
    if (ds->in_flight > 0)
        ds->in_flight--;
    p->in_flight_dep = -1;
    p->last_dep = (int32_t)di;
    p->last_group = p->cur_group >= 0 ? p->cur_group : group_index(r, target->group);
    if (c == RT_ERR_NONE && !res->local) {
        ds->latency_ewma_ms =
            ds->latency_ewma_ms == 0
                ? (res->latency_ms > 0 ? res->latency_ms : 1)
                : (uint32_t)((3ull * res->latency_ms + 7ull * ds->latency_ewma_ms) / 10);
    } else if (is_retryable(c) || c == RT_ERR_AUTH) {
        /* a deployment whose credentials are refused cools down like a failing one (LiteLLM
         * does so for 401): its requests go elsewhere until the key is fixed */
        if (ds->fail_window_start_ms == 0 || now_ms < ds->fail_window_start_ms ||
            now_ms - ds->fail_window_start_ms >= RT_COOLDOWN_WINDOW_MS) {
            ds->fail_window_start_ms = now_ms == 0 ? 1 : now_ms;
            ds->fails = 0;
        }
        ds->fails++;
        if (ds->fails > r->cfg->allowed_fails && r->cfg->cooldown_s > 0) {
            ds->cooldown_until_ms = now_ms + (uint64_t)r->cfg->cooldown_s * 1000u;
            if (ds->cooldown_until_ms == 0)
                ds->cooldown_until_ms = 1;
            ds->cooldowns++;
            ds->fails = 0;
            ds->fail_window_start_ms = 0;
            if (cooled_down != NULL)
                *cooled_down = 1;
        }
    }
    pthread_mutex_unlock(&r->lock);

    /* The outcome so far is this attempt's, and its status the client's: the one place an
     * attempt's result becomes a status. A failure without an error status of its own is 504
     * (timeout) or 502; an unusable answer or a broken connection is 502 whatever came. */
    if (c == RT_ERR_NONE && status == 0)
        status = 200;
    else if (c != RT_ERR_NONE && status < 400)
        status = c == RT_ERR_TIMEOUT ? 504 : 502;
    if (c == RT_ERR_INVALID_RESPONSE || c == RT_ERR_CONNECT)
        status = 502;
    p->outcome.status = status;
    tg_strcpy_cap(p->outcome.error_class, sizeof(p->outcome.error_class), rt_error_class_name(c));
    rt_mask_apply(r->mask, res->message, res->message != NULL ? res->message_len : 0,
                  p->outcome.message, sizeof(p->outcome.message));
    p->outcome.retry_after_s = c == RT_ERR_RATE_LIMIT ? res->retry_after_s : 0;
    p->outcome.from_upstream = res->http_status != 0 && c != RT_ERR_INVALID_RESPONSE;
    p->outcome.served = c == RT_ERR_NONE;
    p->outcome.dep_index = (int32_t)di;
    tg_strcpy_cap(p->outcome.model_group, sizeof(p->outcome.model_group), target->group);

    if (c == RT_ERR_NONE || res->committed || p->attempts >= RT_PLAN_ATTEMPTS_MAX) {
        step = RT_STEP_DONE;
    } else if (is_retryable(c)) {
        step = RT_STEP_NEXT;
    } else if (c == RT_ERR_AUTH) {
        /* no retry (the same credentials would be refused again, LiteLLM's default for an
         * AuthenticationError), but the request's fallbacks apply: another group's
         * deployments carry other credentials */
        p->cur_group = -1;
        step = RT_STEP_NEXT;
    } else if (c == RT_ERR_CONTEXT_WINDOW || c == RT_ERR_CONTENT_POLICY) {
        load_list(r, p, c == RT_ERR_CONTEXT_WINDOW ? LIST_CONTEXT : LIST_POLICY);
        p->cur_group = -1; /* no retry in the same group: the request itself is the problem */
        step = p->n_list > 0 ? RT_STEP_NEXT : RT_STEP_DONE;
    } else {
        step = RT_STEP_DONE;
    }
    if (step == RT_STEP_DONE) {
        p->done = 1;
        final_retry_after(r, p);
    }
    return step;
}

void rt_router_finish(struct rt_router *router, struct rt_plan *plan, uint64_t tokens,
                      uint64_t now_ms)
{
    struct rt_router *r = router;
    struct rt_plan *p = plan;

    if (p->magic != PLAN_MAGIC || p->finished)
        return;
    p->finished = 1;
    if (p->in_flight_dep >= 0) {
        const struct rt_deployment_conf *d = &r->cfg->deployments[p->in_flight_dep];

        rt_trail_add(&p->trail, r->mask, d->group, d->id, 0, "connect", 0,
                     "attempt abandoned before a result", 33);
    }
    /* Tokens count only where a tpm limit reads them: the deployment's, the key's, or one of
     * the key's per-group limits. Nothing to release or count: no lock. */
    if (p->in_flight_dep < 0 && !p->key_parallel_held && !p->team_parallel_held &&
        !(tokens > 0 && p->outcome.served && p->last_dep >= 0 &&
          (r->cfg->deployments[p->last_dep].tpm >= 0 || (p->has_team && p->team_tpm >= 0) ||
           (p->key != NULL && (p->key->tpm_limit >= 0 || p->key->n_group_limits > 0))))) {
        p->done = 1;
        return;
    }
    pthread_mutex_lock(&r->lock);
    if (p->in_flight_dep >= 0) {
        if (r->deps[p->in_flight_dep].in_flight > 0)
            r->deps[p->in_flight_dep].in_flight--;
        p->in_flight_dep = -1;
    }
    if (p->key_parallel_held && p->key != NULL) {
        rt_limiter_key_parallel_release(r->lim, p->key->hash);
        p->key_parallel_held = 0;
    }
    if (p->team_parallel_held) {
        rt_limiter_key_parallel_release(r->lim, p->team_subject);
        p->team_parallel_held = 0;
    }
    if (tokens > 0 && p->outcome.served && p->last_dep >= 0 && p->has_team && p->team_tpm >= 0)
        rt_limiter_key_tokens(r->lim, p->team_subject, NULL, tokens, now_ms);
    if (tokens > 0 && p->outcome.served && p->last_dep >= 0) {
        rt_limiter_deployment_tokens(r->lim, (uint32_t)p->last_dep, tokens, now_ms);
        if (p->key != NULL) {
            rt_limiter_key_tokens(r->lim, p->key->hash, NULL, tokens, now_ms);
            rt_limiter_key_tokens(r->lim, p->key->hash, p->outcome.model_group, tokens, now_ms);
        }
    }
    pthread_mutex_unlock(&r->lock);
    p->done = 1;
}

const struct rt_outcome *rt_router_outcome(const struct rt_plan *plan)
{
    return &plan->outcome;
}

const struct rt_trail *rt_router_trail(const struct rt_plan *plan)
{
    return &plan->trail;
}

uint32_t rt_router_attempts(const struct rt_plan *plan)
{
    return plan->attempts;
}

uint32_t rt_router_fallbacks(const struct rt_plan *plan)
{
    return plan->fallbacks;
}

void rt_router_fill_event(const struct rt_router *router, const struct rt_plan *plan,
                          struct proto_event *ev)
{
    const struct rt_plan *p = plan;

    proto_str_set(ev->model_requested, sizeof(ev->model_requested), p->requested);
    proto_str_set(ev->model_group, sizeof(ev->model_group), p->outcome.model_group);
    if (p->last_dep >= 0) {
        const struct rt_deployment_conf *d = &router->cfg->deployments[p->last_dep];

        proto_str_set(ev->deployment_id, sizeof(ev->deployment_id), d->id);
        proto_str_set(ev->provider, sizeof(ev->provider), d->provider);
        proto_str_set(ev->model, sizeof(ev->model), d->model);
    }
    ev->status = p->outcome.status;
    proto_str_set(ev->error_class, sizeof(ev->error_class), p->outcome.error_class);
    ev->attempts = (int32_t)p->attempts;
    ev->fallbacks = (int32_t)p->fallbacks;
    rt_trail_copy_out(&p->trail, ev->trail, &ev->trail_len);
    if (p->key != NULL) {
        proto_str_set(ev->key_hash, sizeof(ev->key_hash), p->key->hash);
        proto_str_set(ev->key_alias, sizeof(ev->key_alias), p->key->key_alias);
        proto_str_set(ev->team_id, sizeof(ev->team_id), p->key->team_id);
        proto_str_set(ev->user_id, sizeof(ev->user_id), p->key->user_id);
        ev->tags_len = 0;
        for (uint32_t i = 0; i < p->key->n_tags && i < PROTO_TAGS_MAX; i++)
            proto_str_set(ev->tags[ev->tags_len++], PROTO_TAG_CAP, p->key->tags[i]);
    }
}

int rt_router_deployment_state(struct rt_router *router, uint32_t idx, uint64_t now_ms,
                               struct rt_deployment_state *out)
{
    struct dep_state *ds;

    if (idx >= router->cfg->n_deployments)
        return TG_EINVAL;
    pthread_mutex_lock(&router->lock);
    ds = &router->deps[idx];
    out->in_flight = ds->in_flight;
    out->cooldown_until_ms =
        ds->cooldown_until_ms != 0 && now_ms < ds->cooldown_until_ms ? ds->cooldown_until_ms : 0;
    out->fails_in_window =
        ds->fail_window_start_ms != 0 && now_ms - ds->fail_window_start_ms < RT_COOLDOWN_WINDOW_MS
            ? ds->fails
            : 0;
    out->latency_ewma_ms = ds->latency_ewma_ms;
    out->cooldowns = ds->cooldowns;
    pthread_mutex_unlock(&router->lock);
    return 0;
}

void rt_router_limits_enable(struct rt_router *router, uint64_t stale_ms)
{
    pthread_mutex_lock(&router->lock);
    rt_limiter_global_enable(router->lim, stale_ms);
    pthread_mutex_unlock(&router->lock);
}

uint32_t rt_router_limits_export(struct rt_router *router, uint64_t now_ms,
                                 struct rt_limiter_sync_entry *out, uint32_t max,
                                 uint32_t *cursor)
{
    uint32_t n;

    pthread_mutex_lock(&router->lock);
    n = rt_limiter_sync_export(router->lim, now_ms, out, max, cursor);
    pthread_mutex_unlock(&router->lock);
    return n;
}

void rt_router_limits_import(struct rt_router *router, const struct rt_limiter_sync_entry *in,
                             uint32_t n, uint32_t replicas_seen, uint64_t now_ms)
{
    pthread_mutex_lock(&router->lock);
    rt_limiter_sync_import(router->lim, in, n, replicas_seen, now_ms);
    pthread_mutex_unlock(&router->lock);
}

void rt_router_limits_global(struct rt_router *router, uint64_t now_ms,
                             struct rt_limiter_global_state *out)
{
    pthread_mutex_lock(&router->lock);
    rt_limiter_global_get(router->lim, now_ms, out);
    pthread_mutex_unlock(&router->lock);
}
