/* router: the routing core. Pure decisions, no I/O, no clock: time (monotonic ms) and
 * randomness are arguments.
 *
 * Per request:
 *   struct rt_plan plan;                         (caller storage, fixed size, no heap)
 *   if (rt_router_begin(r, key, model, body_disable_fallbacks, rnd, now, &plan) != 0)
 *       answer rt_router_outcome(&plan)          (400 / 401 / 429, message, retry-after)
 *   else
 *       while (rt_router_next(r, &plan, now, &target)) {
 *           ... send the request built from the pristine client request with
 *               target.dep->model swapped in, without holding any router lock ...
 *           if (rt_router_report(r, &plan, &target, &result, now, NULL) == RT_STEP_DONE)
 *               break;
 *       }
 *       answer from rt_router_outcome(&plan) (the final status; when from_upstream is 1 the
 *       provider's own response for the last attempt is what the client gets)
 *   rt_router_finish(r, &plan, total_tokens, now);   (exactly once, also after a failed begin)
 *   rt_router_fill_event(r, &plan, &event);           (model/deployment/attempts/trail/key ids)
 *
 * Decisions:
 * - Alias resolution first: the key's router_settings.model_group_alias, then the global
 *   model_group_alias; a name that is neither an alias nor a group -> 400
 *   "Invalid model name passed in model=X" (error_class "invalid_model").
 * - Allowlist: a key with a non-empty models list must list the requested name or the group it
 *   resolves to -> else 401, error_class "model_not_allowed".
 * - Key state: blocked -> 429 "budget_exceeded"; key rpm_limit/tpm_limit/max_parallel_requests
 *   exceeded -> 429 "rate_limit" with retry-after (no fallback can help: the limit is the key's).
 * - Deployment choice inside a group: deployments cooled down, at their rpm/tpm limit, or (for a
 *   retry) already tried in this group are skipped while others exist; lowest `order` first;
 *   then by strategy: simple-shuffle (weighted random from rnd), least-busy (fewest in flight),
 *   latency-based-routing (lowest latency EWMA, untried deployments first).
 * - A group the key has used up (model_rpm_limit/model_tpm_limit; a limit given under an alias
 *   name is the limit of the group the alias resolves to, whatever name the client uses) or
 *   whose deployments are all unavailable is left for the next fallback group. When nothing
 *   could be attempted at all because of limits/cooldowns -> 429 for the *requested* model,
 *   message like
 *   "Model capacity reached for gpt-ex: rpm limit 1, remaining 0", retry_after_s = the earliest
 *   time any option frees (>= 1).
 * - Outcome of an attempt (rt_router_report):
 *   success (2xx) -> done;
 *   rate_limit (429), server_error (5xx), timeout, connect, invalid_response -> retry in the same
 *   group (another healthy deployment when one exists) while retries remain (key num_retries,
 *   else global num_retries), then the fallback list;
 *   context_window -> context_window_fallbacks; content_policy -> content_policy_fallbacks
 *   (no retry in the same group);
 *   bad_request and any other 4xx -> final, returned as is.
 * - Fallback lists are taken for the group the request resolved to (after alias resolution) and
 *   walked in order, each group once: key router_settings.fallbacks when the key has them
 *   (`[]` = none), else the global list, else default_fallbacks (general list only). Disabled by
 *   key metadata.disable_fallbacks or the body's disable_fallbacks. With
 *   enforce_fallback_model_access (default), a group the key's models list does not allow is
 *   skipped (allowed: the list names the group, or an alias that resolves to it).
 * - Cooldown: a retryable failure of a deployment counts toward allowed_fails; when the failures
 *   within one minute exceed allowed_fails (LiteLLM's rule: allowed_fails: 3 -> the 4th failure
 *   in a minute), the deployment is cooled down for cooldown_time seconds (skipped by routing,
 *   used again afterwards with a fresh count). 4xx client errors do not count.
 * - Bounds: at most RT_PLAN_ATTEMPTS_MAX attempts and RT_PLAN_GROUPS_MAX groups per request;
 *   the trail keeps the newest TG_TRAIL_MAX_ENTRIES attempts (trail.h).
 * - Limits are counted on admission: key rpm at begin, key+group rpm when a group's first
 *   attempt is handed out, deployment rpm for every attempt handed out by rt_router_next. Tokens
 *   are added at rt_router_finish. (A request admitted by the key's own rpm_limit counts against
 *   it even when it then ends in a 429 because every deployment was at capacity.)
 * - Final answer when attempts were made: the last attempt's (provider status and message, or
 *   502 for connect/invalid_response and 504 for timeout without a status), also when the
 *   remaining fallbacks were skipped for limits. The router-made 429 is for requests where no
 *   attempt could be made at all. Every final 429 (except budget_exceeded) carries
 *   retry_after_s >= 1: a provider 429 without its own retry-after gets the earliest time a
 *   skipped option frees, else router_settings.retry_after, else 1.
 *
 * Threads: struct rt_router is shared by every request thread. Its state (cooldowns, in-flight
 * counts, latency EWMAs, limiter windows, random state) is protected by one mutex held only
 * inside rt_router_begin/next/report/finish and the getters, for the decision itself (a few
 * microseconds, no allocation, no I/O). Never call them while holding another lock that a router
 * call could wait on; never hold anything of the router across upstream I/O except the plan and
 * the borrowed target pointers (valid while the config lives). A plan belongs to one request and
 * is used by one thread at a time. The key record passed to begin must stay valid (its keys
 * snapshot held) until rt_router_finish and rt_router_fill_event have returned. */
#ifndef RT_ROUTER_H
#define RT_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "keys.h"
#include "limiter.h"
#include "proto_event.h"
#include "teams.h"
#include "trail.h"

struct rt_mask;

#define RT_PLAN_ATTEMPTS_MAX 32 /* attempts per request, all groups together */
#define RT_PLAN_GROUPS_MAX 16   /* groups per request (requested + fallbacks) */
#define RT_OUTCOME_MESSAGE_CAP 256
#define RT_COOLDOWN_WINDOW_MS 60000u /* allowed_fails are counted over this window */

/* Classification of one attempt, from the I/O side (rt_router_classify helps). */
enum rt_error_class {
    RT_ERR_NONE = 0,         /* success */
    RT_ERR_RATE_LIMIT,       /* "rate_limit": upstream 429 */
    RT_ERR_SERVER,           /* "server_error": upstream 5xx */
    RT_ERR_TIMEOUT,          /* "timeout" */
    RT_ERR_CONNECT,          /* "connect": could not connect / connection reset before reply */
    RT_ERR_CONTEXT_WINDOW,   /* "context_window": context length exceeded (400) */
    RT_ERR_CONTENT_POLICY,   /* "content_policy": content policy violation (400) */
    RT_ERR_BAD_REQUEST,      /* "bad_request": other 4xx */
    RT_ERR_INVALID_RESPONSE, /* "invalid_response": 2xx with an unusable body, cut stream */
    RT_ERR_AUTH,             /* "auth": the provider refused the deployment's credentials
                              * (401, 403; LiteLLM's AuthenticationError) */
};
#define RT_ERR_CLASSES (RT_ERR_AUTH + 1)

/* rt_error_class_name: the event/trail string of a class ("" for RT_ERR_NONE). Static. */
const char *rt_error_class_name(enum rt_error_class c);

/* rt_router_classify: class of an upstream answer: 2xx -> NONE, 429 -> RATE_LIMIT,
 * >= 500 -> SERVER, 400/413/422 whose body mentions context_length_exceeded / "context length" /
 * "prompt is too long" / "maximum context" -> CONTEXT_WINDOW, content_policy_violation /
 * "content management policy" / "content_filter" -> CONTENT_POLICY, 401 / 403 -> AUTH, other
 * 4xx -> BAD_REQUEST.
 * body may be NULL. Pure. */
enum rt_error_class rt_router_classify(int http_status, const char *body, size_t len);

/* What rt_router_next hands out: one deployment to try. Pointers are borrowed from the config
 * (valid while the config lives). */
struct rt_target {
    const struct rt_deployment_conf *dep; /* provider, kind, model, api_base, api_key,
                                           * timeout_ms, stream_timeout_ms, prices */
    const char *group;                    /* model group of this attempt */
    uint32_t dep_index;                   /* index in cfg->deployments */
    uint32_t attempt;                     /* 1-based attempt number in the request */
    int is_retry;                         /* 1: not the first attempt in this group */
    int is_fallback;                      /* 1: group differs from the resolved requested group */
};

/* One attempt's result, from the I/O side. */
struct rt_result {
    int32_t http_status;             /* upstream status, 0 when none (timeout/connect) */
    enum rt_error_class error_class; /* RT_ERR_NONE on success */
    uint32_t latency_ms;             /* attempt duration */
    const char *message;             /* raw error text (masked by the router), may be NULL */
    size_t message_len;
    uint32_t retry_after_s; /* provider's retry-after, 0 = none */
    int committed;          /* 1: response already started to the client (a stream):
                             * no further attempt is possible, whatever the class */
    int local;              /* 1: answered by the router without the provider (a token count
                             * estimate): no latency sample for the deployment */
};

/* The final answer of a request. */
struct rt_outcome {
    int32_t status;                          /* HTTP status for the client (200 on success) */
    char error_class[PROTO_ERROR_CLASS_CAP]; /* "" on success; rt_error_class_name() values
                                              * plus "invalid_model", "model_not_allowed",
                                              * "budget_exceeded" */
    char message[RT_OUTCOME_MESSAGE_CAP];    /* masked; for router-made errors the message to
                                              * put in the API's error shape */
    uint32_t retry_after_s;                  /* > 0: send retry-after */
    int from_upstream;                       /* 1: status (and body) are the provider's answer
                                              * to the last attempt; 0: router-made */
    int served;                              /* 1 when an attempt succeeded */
    int32_t dep_index;                       /* deployment of the last attempt, -1 when none */
    char model_group[RT_NAME_CAP];           /* group of the last attempt ("" when none) */
};

enum rt_step {
    RT_STEP_DONE = 0, /* the outcome is final: answer the client */
    RT_STEP_NEXT = 1, /* call rt_router_next for another attempt */
};

/* Per-request plan. Caller storage, fixed size (a few KB), no heap. Fields are private to the
 * router: read them through the functions below. */
struct rt_plan {
    uint32_t magic;           /* set by begin */
    int done;                 /* outcome final */
    int finished;             /* rt_router_finish ran */
    const struct rt_key *key; /* borrowed, may be NULL */
    char requested[RT_NAME_CAP];
    int32_t req_group; /* resolved group index, -1 when unresolved */
    int32_t cur_group; /* group being tried, -1 when none */
    int32_t num_retries;
    int disable_fallbacks;
    uint32_t group_attempts; /* attempts handed out in cur_group */
    uint64_t tried_mask;     /* deployments (by position in the group) tried in cur_group */
    int32_t groups_done[RT_PLAN_GROUPS_MAX];
    uint32_t n_groups_done;
    int32_t list[RT_PLAN_GROUPS_MAX]; /* pending fallback groups */
    uint32_t n_list;
    uint32_t list_pos;
    int list_kind; /* which fallback list is loaded */
    uint32_t attempts;
    uint32_t fallbacks;
    int32_t in_flight_dep; /* deployment handed out and not yet reported, -1 */
    int key_parallel_held;
    int has_team;                                    /* the key's team is known: its limits apply */
    char team_subject[RT_LIMITER_SUBJECT_MAX + 1];   /* the team's limiter subject */
    int64_t team_tpm;                                /* the team's tpm_limit (RT_LIMIT_NONE) */
    int team_parallel_held;
    int32_t last_dep; /* deployment of the last attempt, -1 */
    int32_t last_group;
    uint64_t rng; /* per-request random state */
    int limited;  /* some option was skipped for limits/cooldown */
    uint32_t limited_retry_after_s;
    char limited_msg[RT_OUTCOME_MESSAGE_CAP];
    int requested_limited; /* limited_msg describes the requested group */
    int64_t input_tokens;  /* estimate for router_settings.enable_pre_call_checks, 0 = none */
    int64_t too_long_max;  /* the largest max_input_tokens of a deployment skipped for size */
    int group_too_long;    /* every deployment of the group just left was skipped for size */
    struct rt_outcome outcome;
    struct rt_trail trail; /* last: rt_router_begin zeroes what is before it, rt_trail_init it */
};

/* Health view of one deployment (for /metrics, /health and tests). */
struct rt_deployment_state {
    uint32_t in_flight;         /* attempts handed out and not reported */
    uint64_t cooldown_until_ms; /* 0 when not cooled down (monotonic ms) */
    uint32_t fails_in_window;   /* retryable failures counted toward allowed_fails */
    uint32_t latency_ewma_ms;   /* 0 until a success */
    uint64_t cooldowns;         /* cooldowns started since create */
};

struct rt_router;

/* rt_router_create: a router for cfg (borrowed: must outlive the router; target pointers point
 * into it) and mask (borrowed, may be NULL: built-in rules only; must outlive the router).
 * Creates its limiter with cfg->limiter_keys key slots and the deployments' rpm/tpm.
 * Returns new (rt_router_destroy) or NULL with err. Main thread. */
struct rt_router *rt_router_create(const struct rt_config *cfg, const struct rt_mask *mask,
                                   char *err, size_t errlen);

/* rt_router_set_teams: the teams table (borrowed, outlives the router; NULL = none) whose
 * limits apply to keys with a team_id: the team's models, block, rpm_limit, tpm_limit and
 * max_parallel_requests (teams.h). rt_router_begin reads the current snapshot (a short lock,
 * no I/O). A key naming a team the table does not hold is limited by its own limits only. Main
 * thread, before requests are served. */
void rt_router_set_teams(struct rt_router *router, struct rt_teams *teams);

/* rt_router_destroy: free; sets *router to NULL; accepts NULL. After all requests ended. */
void rt_router_destroy(struct rt_router **router);

/* rt_router_begin: start a plan for a request for model (NUL-terminated, as the client sent
 * it), by key (borrowed record or NULL when the request is not key-authenticated, e.g. the
 * master key), disable_fallbacks from the request body (0/1), rnd (caller's random, e.g. from
 * tg_random_bytes or a per-thread PRNG) at now_ms. Returns 0 (plan ready: call rt_router_next)
 * or a negative code with rt_router_outcome(plan) filled: TG_ENOTFOUND (unknown model, 400),
 * TG_EDENIED (not in the key's models, 401), TG_ELIMIT (key limits or budget block, 429).
 * Takes the router mutex. */
int rt_router_begin(struct rt_router *router, const struct rt_key *key, const char *model,
                    int disable_fallbacks, uint64_t rnd, uint64_t now_ms, struct rt_plan *plan);

/* rt_router_next: the next deployment to try into *out (1), or 0 when the plan is done (answer
 * rt_router_outcome). Counts the attempt in the limiter and in the deployment's in-flight count.
 * Every 1 must be followed by exactly one rt_router_report for that target. Takes the mutex. */
int rt_router_next(struct rt_router *router, struct rt_plan *plan, uint64_t now_ms,
                   struct rt_target *out);

/* rt_router_report: the result of the attempt handed out last (target: borrowed, from next).
 * Adds a trail entry (message masked), updates cooldowns / in-flight / latency, and decides:
 * RT_STEP_NEXT (call rt_router_next, which may still return 0 when no option is left: the
 * outcome is then this attempt's) or RT_STEP_DONE. *cooled_down (may be NULL) is set to 1
 * when this failure started a cooldown of the target's deployment (for the cooldown event and
 * tollgate_router_cooldowns_total), else 0. Takes the mutex. */
enum rt_step rt_router_report(struct rt_router *router, struct rt_plan *plan,
                              const struct rt_target *target, const struct rt_result *res,
                              uint64_t now_ms, int *cooled_down);

/* rt_router_finish: end the request: releases the key's parallel slot, returns any attempt
 * that was handed out but never reported (counted as a connect failure without cooldown), and
 * adds tokens (prompt + completion of the served call, 0 when unknown) to the tpm windows of the
 * served deployment, the key and the key+group. Call exactly once per begin (also when begin
 * failed; further calls are no-ops). Takes the mutex. */
void rt_router_finish(struct rt_router *router, struct rt_plan *plan, uint64_t tokens,
                      uint64_t now_ms);

/* rt_router_outcome: the plan's outcome (final once begin failed, next returned 0, or report
 * returned RT_STEP_DONE). Borrowed from the plan. No lock. */
const struct rt_outcome *rt_router_outcome(const struct rt_plan *plan);

/* rt_router_trail: the plan's trail (borrowed). No lock. */
const struct rt_trail *rt_router_trail(const struct rt_plan *plan);

/* rt_router_attempts / rt_router_fallbacks: attempts handed out; fallback groups in which an
 * attempt was made (groups skipped for limits or the allowlist do not count). */
uint32_t rt_router_attempts(const struct rt_plan *plan);
uint32_t rt_router_fallbacks(const struct rt_plan *plan);

/* rt_router_fill_event: fill the routing fields of ev from the plan: model_requested,
 * model_group, deployment_id, provider, model (of the last attempt), status, error_class,
 * attempts, fallbacks, trail/trail_len, and from the key (when any) key_hash, key_alias,
 * team_id, user_id, tags. Leaves every other field alone. No lock. */
void rt_router_fill_event(const struct rt_router *router, const struct rt_plan *plan,
                          struct proto_event *ev);

/* rt_router_set_input_tokens: the request's input tokens (an estimate, usage.h) for the
 * pre-call checks (router_settings.enable_pre_call_checks): a deployment whose
 * max_input_tokens the estimate exceeds is skipped before sending; a group left with none goes
 * to its context_window_fallbacks, and with nothing at all to try the outcome is 400
 * context_length_exceeded. After rt_router_begin, before the first rt_router_next. */
void rt_router_set_input_tokens(struct rt_plan *plan, int64_t tokens);

/* rt_router_deployment_state: health view of deployment idx at now_ms. Returns 0 or TG_EINVAL.
 * Takes the mutex. */
int rt_router_deployment_state(struct rt_router *router, uint32_t idx, uint64_t now_ms,
                               struct rt_deployment_state *out);

/* Limits across replicas (limiter.h, limsync.h): the limiter's exchange, each under the router
 * mutex for a copy only. rt_router_limits_enable: main thread, before serving. The others: the
 * sync thread (and /metrics for _global). */
void rt_router_limits_enable(struct rt_router *router, uint64_t stale_ms);
uint32_t rt_router_limits_export(struct rt_router *router, uint64_t now_ms,
                                 struct rt_limiter_sync_entry *out, uint32_t max,
                                 uint32_t *cursor);
void rt_router_limits_import(struct rt_router *router, const struct rt_limiter_sync_entry *in,
                             uint32_t n, uint32_t replicas_seen, uint64_t now_ms);
void rt_router_limits_global(struct rt_router *router, uint64_t now_ms,
                             struct rt_limiter_global_state *out);

#endif
