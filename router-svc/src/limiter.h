/* limiter: sliding-window request and token rate limits, counted on admission.
 *
 * Subjects:
 * - deployments, by index in the config's model_list (rpm, tpm from litellm_params);
 * - keys, by SHA-256 hash (rpm_limit, tpm_limit, max_parallel_requests);
 * - key + model group pairs (model_rpm_limit, model_tpm_limit);
 * - teams (a team's rpm_limit, tpm_limit, max_parallel_requests, shared by the team's keys):
 *   the key functions with the subject rt_limiter_team_subject() makes ("team:<team id>", which
 *   no key hash can equal), in the same bounded table of key_slots entries.
 * The limits of a key are passed with each call (they live in the key record), so a key update
 * takes effect on the next request without touching the limiter.
 *
 * Window: 60 one-second buckets per subject. A request admitted at time t (ms) counts against
 * every check made while floor(now/1000) - floor(t/1000) < 60, i.e. it leaves the window at the
 * start of the 60th whole second after its own. retry_after_s is the exact number of whole
 * seconds until enough of the window has left for the check to pass (>= 1): a retry made
 * retry_after_s seconds later is admitted (when nothing else was admitted meanwhile).
 * rpm: a check passes when requests in the window < rpm. Requests are counted by *_admit (the
 * pre-call, "on admission" rule), never when only checked.
 * tpm: a check passes when tokens in the window < tpm; tokens are added after the call
 * (*_tokens) because only then are they known.
 * A limit of 0 admits nothing; RT_LIMIT_NONE (negative) means no limit.
 *
 * Bounds: deployment slots are fixed at create; key and key+group slots come from one table of
 * key_slots entries fixed at create. A slot whose window is empty and has nothing in flight is
 * stale: it is reused, and a sweep of RT_LIMITER_SWEEP_SLOTS slots per key call empties stale
 * slots, so lookups stay as short as the live subjects make them. When no slot is free the request is admitted without that limit (fail open for
 * limits, so that traffic keeps flowing), counted in stats.slots_full, and logged rate-limited.
 *
 * Across replicas (optional, rt_limiter_global_enable): a sync thread (limsync.h) copies each
 * subject's local window out (rt_limiter_sync_export), exchanges it through Redis, and hands back
 * what the other live replicas counted (rt_limiter_sync_import). A check then counts local +
 * remote against the limit. The remote counts are a snapshot at most one sync interval old, so a
 * limit N admits at most N + (what the other replicas admit in one interval) in a window. When no
 * import arrived for stale_ms (Redis down, or never reached) the remote counts are not used and
 * every limit is divided by the replicas seen at the last import (at least 1): each replica
 * admits max(1, N / replicas) (0 stays 0) and max_parallel_requests likewise, so the replicas
 * together stay near N, never at N each. retry_after_s with remote counts: the local buckets'
 * exact wait when they alone can free enough, else the remote counts taken as spread evenly over
 * the window.
 *
 * Threads: not thread-safe. The router calls it under its own mutex (router.h); no other caller
 * should use the router's limiter without that lock. Time is an argument (monotonic ms); the
 * limiter's clock never goes back: a call with a time older than the latest second any call
 * passed (a caller that read the clock before waiting for the lock) counts in that latest
 * second, so an admission is never missed by a check made with an older time. */
#ifndef RT_LIMITER_H
#define RT_LIMITER_H

#include <stddef.h>
#include <stdint.h>

#include "proto_event.h"
#include "tg_ids.h"

#define RT_LIMITER_WINDOW_S 60
#define RT_LIMITER_SWEEP_SLOTS 16 /* slots the stale-slot sweep looks at per key call */
#define RT_LIMITER_SUBJECT_MAX 72 /* a subject's bytes: a key hash (64) or "team:" + id (<= 69) */

enum rt_limit_kind {
    RT_LIMIT_KIND_RPM = 0,
    RT_LIMIT_KIND_TPM = 1,
    RT_LIMIT_KIND_PARALLEL = 2,
};

/* Result of a failed check. */
struct rt_limit_status {
    enum rt_limit_kind kind; /* which limit blocked */
    int64_t limit;           /* its configured value */
    int64_t remaining;       /* what is left in the window (0 when blocked by rpm/parallel) */
    uint32_t retry_after_s;  /* >= 1: whole seconds until the check can pass */
};

/* One subject as exchanged between replicas (rt_limiter_sync_export / _import). */
enum rt_limiter_subject_kind {
    RT_LIMITER_SUBJECT_DEPLOYMENT = 0, /* idx */
    RT_LIMITER_SUBJECT_KEY = 1,        /* hash, group "" */
    RT_LIMITER_SUBJECT_KEY_GROUP = 2,  /* hash, group */
};

struct rt_limiter_sync_entry {
    enum rt_limiter_subject_kind kind;
    uint32_t idx;                       /* deployment index */
    char hash[RT_LIMITER_SUBJECT_MAX + 1]; /* key hash, or a team's subject ("team:<id>") */
    char group[PROTO_MODEL_CAP];        /* model group, "" for the key itself */
    uint64_t reqs;                      /* export: this replica's requests in the window */
    uint64_t tokens;                    /* export: its tokens in the window */
    uint32_t in_flight;                 /* export: its parallel requests held (keys) */
    uint64_t remote_reqs;               /* import: the other live replicas' requests */
    uint64_t remote_tokens;             /* import: their tokens */
    uint64_t remote_in_flight;          /* import: their parallel requests */
};

struct rt_limiter_global_state {
    int enabled;            /* rt_limiter_global_enable was called */
    int fallback;           /* 1 when no import arrived within stale_ms (limits divided) */
    uint32_t replicas_seen; /* at the last import (>= 1) */
    uint64_t last_import_ms;
};

struct rt_limiter_stats {
    uint64_t slots_used; /* key and key+group slots holding a window */
    uint64_t slots_cap;  /* key_slots */
    uint64_t slots_full; /* admissions made without a slot (table full) */
    uint64_t limited;    /* checks that returned TG_ELIMIT */
    uint64_t probes;     /* key/key+group slots examined by lookups (chain lengths, summed) */
};

struct rt_limiter;

/* rt_limiter_create: n_deployments deployment slots (all unlimited until set) and key_slots
 * (>= 1) key/key+group slots. Returns new (rt_limiter_destroy) or NULL with err. */
struct rt_limiter *rt_limiter_create(uint32_t n_deployments, uint32_t key_slots, char *err,
                                     size_t errlen);

/* rt_limiter_destroy: free; sets *lim to NULL; accepts NULL. */
void rt_limiter_destroy(struct rt_limiter **lim);

/* rt_limiter_set_deployment: limits of deployment idx (RT_LIMIT_NONE = none). Returns 0 or
 * TG_EINVAL (idx out of range). */
int rt_limiter_set_deployment(struct rt_limiter *lim, uint32_t idx, int64_t rpm, int64_t tpm);

/* rt_limiter_deployment_check: 0 when deployment idx may take one more request now, else
 * TG_ELIMIT with *st filled (st may be NULL). Does not count. */
int rt_limiter_deployment_check(struct rt_limiter *lim, uint32_t idx, uint64_t now_ms,
                                struct rt_limit_status *st);

/* rt_limiter_deployment_admit: count one request for deployment idx at now_ms. */
void rt_limiter_deployment_admit(struct rt_limiter *lim, uint32_t idx, uint64_t now_ms);

/* rt_limiter_deployment_tokens: add tokens used by a call admitted earlier, at now_ms. */
void rt_limiter_deployment_tokens(struct rt_limiter *lim, uint32_t idx, uint64_t tokens,
                                  uint64_t now_ms);

/* rt_limiter_key_check: 0 when the subject (key_hash, group) may take one more request under
 * rpm/tpm, else TG_ELIMIT with *st. group NULL = the key itself (rpm_limit/tpm_limit), else the
 * key's per-group limits. key_hash and group are borrowed for the call. Does not count. */
int rt_limiter_key_check(struct rt_limiter *lim, const char *key_hash, const char *group,
                         int64_t rpm, int64_t tpm, uint64_t now_ms, struct rt_limit_status *st);

/* rt_limiter_key_admit: count one request for the subject. Returns 0, or TG_EFULL when no slot
 * was available (the request is admitted uncounted; stats.slots_full incremented). Subjects
 * without any limit need not be admitted. */
int rt_limiter_key_admit(struct rt_limiter *lim, const char *key_hash, const char *group,
                         uint64_t now_ms);

/* rt_limiter_key_tokens: add tokens for the subject (no-op when it has no slot). */
void rt_limiter_key_tokens(struct rt_limiter *lim, const char *key_hash, const char *group,
                           uint64_t tokens, uint64_t now_ms);

/* rt_limiter_key_parallel_acquire: take one in-flight slot for key_hash when fewer than max
 * are held. Returns 0 (the caller must release exactly once), TG_ELIMIT (st->kind =
 * RT_LIMIT_KIND_PARALLEL, retry_after_s = 1), or TG_EFULL: admitted, nothing held, nothing to
 * release (max is RT_LIMIT_NONE, or no slot was free: then stats.slots_full is counted). */
int rt_limiter_key_parallel_acquire(struct rt_limiter *lim, const char *key_hash, int64_t max,
                                    struct rt_limit_status *st);

/* rt_limiter_key_parallel_release: give back a slot taken by a 0 return above. */
void rt_limiter_key_parallel_release(struct rt_limiter *lim, const char *key_hash);

/* rt_limiter_global_enable: count other replicas' admissions (see above); an import older than
 * stale_ms (> 0) puts the limiter in fallback. Until the first import: fallback with 1 replica
 * seen (the replica knows of no other). */
void rt_limiter_global_enable(struct rt_limiter *lim, uint64_t stale_ms);

/* rt_limiter_sync_export: copy up to max subjects with something in their window or in flight
 * into out (caller storage), starting at *cursor (advanced, so that a table larger than max is
 * covered over successive rounds). Deployments with a limit come first. Returns the count.
 * Under the router's lock; copies only. */
uint32_t rt_limiter_sync_export(struct rt_limiter *lim, uint64_t now_ms,
                                struct rt_limiter_sync_entry *out, uint32_t max,
                                uint32_t *cursor);

/* rt_limiter_sync_import: the remote counts of n entries (from an export; a subject gone since
 * is skipped, none is created), replicas seen (0 is taken as 1), at now_ms: the limiter leaves
 * fallback. Under the router's lock. */
void rt_limiter_sync_import(struct rt_limiter *lim, const struct rt_limiter_sync_entry *in,
                            uint32_t n, uint32_t replicas_seen, uint64_t now_ms);

/* rt_limiter_global_get: the exchange's state at now_ms. */
void rt_limiter_global_get(struct rt_limiter *lim, uint64_t now_ms,
                           struct rt_limiter_global_state *out);

/* rt_limiter_team_subject: the limiter subject of a team ("team:<team_id>") into out. Returns 0,
 * or TG_EINVAL when team_id is empty or longer than RT_LIMITER_SUBJECT_MAX - 5 bytes. */
int rt_limiter_team_subject(const char *team_id, char out[RT_LIMITER_SUBJECT_MAX + 1]);

/* rt_limiter_get_stats: counters. */
void rt_limiter_get_stats(const struct rt_limiter *lim, struct rt_limiter_stats *out);

#endif
