/* teams: the teams table (LiteLLM's teams). team_id -> immutable team record.
 *
 * A key whose record names a team_id is limited by its own limits and by its team's: the team's
 * models (the key may use a model only when both allow it), rpm_limit, tpm_limit and
 * max_parallel_requests (counted by the router's limiter under the team's subject, shared by
 * every key of the team), and the team's block (/team/block). Team budgets are spend-svc's: it
 * blocks the team's keys with block: records (proto_control.h).
 *
 * Publication is the keys table's (keys.h), simpler: a struct rt_teams_table is an immutable
 * snapshot (a sorted array of reference-counted records); readers take a reference with
 * rt_teams_acquire (a short lock to load the pointer and count the reference), look up without a
 * lock and rt_teams_release; writers (team API, control topic) build the next snapshot off to
 * the side under a writer mutex and swap the pointer. Records are shared between snapshots, so a
 * change copies the index (8 bytes per team), not the records.
 *
 * Sources: the control topic (team:<id> records, proto_control.h) and, through it, the team API
 * (team_api.h), and at start the teams snapshot file (control.h, "Snapshot file"), so that a
 * replica restarted while Kafka is unreachable still enforces its teams; the replay then brings
 * the table up to date (readiness waits for it, or for the degraded snapshot-only delay).
 *
 * Bounds: at most max_teams teams (config tollgate.limits.max_teams, default
 * RT_DEFAULT_MAX_TEAMS); a change beyond it fails with TG_EFULL (counted in
 * stats.full_rejections). A team's stored JSON is at most RT_TEAM_JSON_MAX bytes: models at most
 * RT_TEAM_MODELS_MAX names, metadata at most RT_TEAM_METADATA_MAX bytes of compact JSON, the
 * LiteLLM fields stored without being acted on (team_extra.h) at most RT_TEAM_EXTRA_MAX_BYTES.
 * A team in the table takes the fixed part of struct rt_team_spec plus the length of its extra
 * text (about 9 KB + at most 16 KB): the extra's buffer is allocated to its length, so a team
 * without such fields costs what it did before them. */
#ifndef RT_TEAMS_H
#define RT_TEAMS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "proto_control.h"

#define RT_TEAM_ID_CAP (PROTO_CTL_TEAM_ID_MAX + 1) /* team id, bytes incl. NUL */
#define RT_TEAM_MODELS_MAX RT_KEY_MODELS_MAX       /* entries in a team's models */
#define RT_TEAM_METADATA_MAX 4096                  /* metadata, compact JSON bytes incl. NUL */
#define RT_TEAM_EXTRA_MAX_BYTES 16384 /* LiteLLM fields stored, not acted on (team_extra.h),
                                       * compact JSON bytes without the NUL */
/* stored form: fixed fields, models (each name escaped at most 6x), metadata and the member
 * "extra" (written as the object it holds: its bytes plus the name) fit */
#define RT_TEAM_JSON_MAX                                                                           \
    (1024 + RT_TEAM_MODELS_MAX * (RT_NAME_CAP * 6 + 3) + RT_TEAM_METADATA_MAX +                    \
     RT_TEAM_EXTRA_MAX_BYTES + 16)
_Static_assert(RT_TEAM_JSON_MAX <= PROTO_CTL_TEAM_VALUE_MAX,
               "a team's stored form is a value every reader accepts");

/* A team's settings (caller storage, about 25 KB). Strings are "" when absent.
 *
 * extra comes last: a spec in the table (rt_teams_lookup, rt_teams_at) is allocated only up to
 * its extra's NUL, so such a spec is copied with rt_team_spec_copy, never by assignment. */
struct rt_team_spec {
    char team_id[RT_TEAM_ID_CAP];
    char team_alias[RT_ID_CAP];
    uint32_t n_models; /* 0 = the team restricts no model */
    char models[RT_TEAM_MODELS_MAX][RT_NAME_CAP];
    int64_t max_budget_nusd;       /* RT_LIMIT_NONE when none (spend-svc enforces it) */
    int64_t budget_duration_s;     /* 0 = none */
    int64_t rpm_limit;             /* RT_LIMIT_NONE when absent */
    int64_t tpm_limit;             /* RT_LIMIT_NONE when absent */
    int64_t max_parallel_requests; /* RT_LIMIT_NONE when absent */
    char metadata[RT_TEAM_METADATA_MAX]; /* a JSON object as compact text; "{}" when none */
    int blocked;                         /* 1: blocked by an admin (/team/block) */
    /* LiteLLM's team fields Tollgate stores and returns without acting on them (team_extra.h):
     * a compact JSON object, members in name order; "" when none. Last member (see above). */
    char extra[RT_TEAM_EXTRA_MAX_BYTES + 1];
};

struct rt_teams;
struct rt_teams_table;

struct rt_teams_stats {
    uint64_t count;           /* teams in the current snapshot */
    uint64_t capacity;        /* max_teams */
    uint64_t generation;      /* snapshots published so far (1 after create) */
    uint64_t full_rejections; /* changes refused with TG_EFULL */
};

/* rt_team_spec_init: no alias, no models, no limits, metadata "{}", not blocked, no extra. */
void rt_team_spec_init(struct rt_team_spec *spec);

/* rt_team_spec_copy: *dst = *src, reading src only up to its extra's NUL (src may be a spec of
 * the table). dst is caller storage of the full size. */
void rt_team_spec_copy(struct rt_team_spec *dst, const struct rt_team_spec *src);

/* rt_teams_create: an empty table capped at max_teams (>= 1). Returns new (rt_teams_destroy) or
 * NULL with err. Main thread. */
struct rt_teams *rt_teams_create(size_t max_teams, char *err, size_t errlen);

/* rt_teams_destroy: free the store and its snapshot reference; sets *teams to NULL; accepts
 * NULL. Snapshots still acquired stay valid until released. */
void rt_teams_destroy(struct rt_teams **teams);

/* rt_teams_acquire: a new reference to the current snapshot (never NULL); release it with
 * rt_teams_release. Any thread; the short swap lock only. teams may be NULL: returns NULL. */
struct rt_teams_table *rt_teams_acquire(struct rt_teams *teams);

/* rt_teams_release: drop a reference (the last frees the snapshot). Sets *table to NULL;
 * accepts NULL. Any thread. */
void rt_teams_release(struct rt_teams_table **table);

/* rt_teams_lookup: the team with that id, borrowed while table is held, or NULL (table NULL,
 * id NULL or "", unknown). Any thread, no lock. */
const struct rt_team_spec *rt_teams_lookup(const struct rt_teams_table *table, const char *id);

/* rt_teams_count: teams in a snapshot (0 for NULL). */
size_t rt_teams_count(const struct rt_teams_table *table);

/* rt_teams_at: the i-th team of a snapshot in team_id order (i < rt_teams_count), borrowed. */
const struct rt_team_spec *rt_teams_at(const struct rt_teams_table *table, size_t i);

/* rt_teams_put: add or replace the team spec->team_id (copied). rt_teams_delete: remove it (an
 * unknown id is a no-op). Return 0; TG_EFULL (a new team beyond max_teams; counted); TG_EINVAL
 * (invalid id); TG_ENOMEM. Any thread; serialised with other writers; readers never wait for
 * the build. */
int rt_teams_put(struct rt_teams *teams, const struct rt_team_spec *spec);
int rt_teams_delete(struct rt_teams *teams, const char *id);

/* rt_teams_note_full: count a new team refused before it reached the table (the team API checks
 * the capacity before publishing, so that no replica is sent a team it cannot hold). */
void rt_teams_note_full(struct rt_teams *teams);

/* rt_teams_get_stats: counters. Any thread. */
void rt_teams_get_stats(struct rt_teams *teams, struct rt_teams_stats *out);

/* ---- team specs as JSON ---- */

enum rt_team_json_form {
    /* Team API body (/team/new, /team/update): team_id, team_alias, models, max_budget (USD),
     * budget_duration ("30d"), rpm_limit, tpm_limit, max_parallel_requests, metadata (an
     * object), blocked, and the fields stored without being acted on (team_extra.h: each
     * checked for its type; null removes one; absent ones keep theirs). Any other member:
     * "<name>: unknown field". */
    RT_TEAM_JSON_API = 0,
    /* Stored form (control topic value): every field, in the order of rt_team_spec_to_json,
     * with exact integers max_budget_nusd and budget_duration_s; "extra" (an object of
     * team_extra.h's fields, or null) is the whole set of them. */
    RT_TEAM_JSON_STORED = 1,
};

/* rt_team_spec_from_json: apply the members of a JSON object to spec (absent members keep their
 * value, so an update merges; null resets a member to its default). cfg (may be NULL) checks
 * that every model named exists (group or alias). Returns 0, or TG_EINVAL with err naming the
 * member ("rpm_limit: expected a non-negative integer or null", "colour: unknown field"); spec
 * may then be partly updated. Any thread. */
int rt_team_spec_from_json(struct rt_team_spec *spec, enum rt_team_json_form form,
                           const char *json, size_t len, const struct rt_config *cfg, char *err,
                           size_t errlen);

/* rt_team_spec_to_json: the stored form of spec into out (cap bytes, NUL-terminated), length in
 * *outlen:
 *   {"team_id":..,"team_alias":..,"models":[..],"max_budget_nusd":n|null,
 *    "budget_duration_s":n,"rpm_limit":n|null,"tpm_limit":n|null,
 *    "max_parallel_requests":n|null,"metadata":{..},"blocked":bool,"extra":{..}}
 * "extra" only when the team has at least one field of team_extra.h (older readers and spend-svc
 * skip it); numbers in it with 15 significant digits, so decoding and encoding again gives the
 * same bytes.
 * Returns 0, TG_ETOOBIG (cap too small; RT_TEAM_JSON_MAX always suffices), TG_EINVAL (invalid
 * id or metadata text) or TG_ENOMEM. */
int rt_team_spec_to_json(const struct rt_team_spec *spec, char *out, size_t cap, size_t *outlen);

/* rt_teams_control_decode: one control record (rkey of rklen bytes; value of len bytes, NULL
 * for a tombstone). Returns 0 with *is_put (1: spec holds the team, parsed from the stored
 * form; 0: a tombstone, spec->team_id names the team), TG_ENOTFOUND (not a team record: skip),
 * or TG_EINVAL with err (bad id, a value naming another team, an invalid stored form). Any
 * thread. */
int rt_teams_control_decode(const char *rkey, size_t rklen, const char *value, size_t len,
                            struct rt_team_spec *spec, int *is_put, char *err, size_t errlen);

/* rt_team_allows: 1 when the team (NULL: no team) allows the model name: its models list is
 * empty or contains name. */
int rt_team_allows(const struct rt_team_spec *team, const char *name);

#endif
