/* budgets: key and team budgets checked against committed spend.
 *
 * Keys come from the control topic (`key:<hash>` records, mirrored here and in api_keys);
 * team budgets from the config and from `team:<id>` records (router-svc's /team/new and
 * /team/update; a config team of the same id wins). Teams with a budget are mirrored up to
 * SP_BUDGET_TEAMS_MIRROR_MAX (beyond: not tracked, counted, logged). A budget has max_budget (nano-USD) and a period
 * (budget_duration) aligned on multiples of the period since the Unix epoch, UTC (a 30d budget
 * restarts every 30 days counted from 1970-01-01; a 1d budget at midnight UTC).
 *
 * After each committed batch, for every key and team of the batch that has a budget, spend in
 * the current period is read from Postgres (committed rows only). The highest threshold reached
 * (default 50/80/100 %) is stored in budget_state with "only upwards within a period", so a
 * threshold is announced once per period, across restarts and replicas: the announcement is a
 * typed record (struct sp_budget_crossing) handed to a hook (the alerter plugs in there).
 * At 100 % a `block:<key_hash>` record is published to the control topic (for a team: one per
 * key of the team); when the period rolls over (or the budget is removed) the block is lifted
 * with a tombstone of the same record key. */
#ifndef SP_BUDGETS_H
#define SP_BUDGETS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "pg_sink.h"
#include "tg_buf.h"

/* One threshold crossing, announced once per subject, threshold level and period. */
struct sp_budget_crossing {
    char kind[8];                      /* "key" or "team" */
    char subject[SP_PG_SUBJECT_MAX];   /* key hash or team id */
    char name[SP_PG_SUBJECT_MAX];      /* key alias (or short hash prefix) or team id */
    int threshold_pct;                 /* highest threshold reached, e.g. 80 */
    int64_t spend_nusd;                /* committed spend in the period */
    int64_t max_budget_nusd;
    int64_t period_start_ms;           /* epoch ms */
    int64_t period_end_ms;
};

struct sp_budgets_hooks {
    /* crossing: a threshold was reached (consumer thread; must not block). */
    void (*crossing)(void *ctx, const struct sp_budget_crossing *c);
    /* publish: produce record key `block:<key_hash>` with value (NULL: tombstone) to the
     * control topic and wait for the acknowledgement (acks=all). Returns 0 or a tg_err. */
    int (*publish)(void *ctx, const char *record_key, const char *value, size_t len);
    void *ctx;
};

/* A budget without budget_duration never resets (LiteLLM's lifetime budget): it is one period
 * of 100 years starting at the Unix epoch, so every computation stays the same. A longer
 * budget_duration (key record or team) is kept as this one. */
#define SP_BUDGET_LIFETIME_S 3153600000LL

struct sp_budgets;

/* sp_budgets_create: capacities from cfg (keys_max, thresholds, teams; borrowed for the call).
 * hooks copied. Returns new (sp_budgets_destroy) or NULL with err. */
struct sp_budgets *sp_budgets_create(const struct sp_config *cfg,
                                     const struct sp_budgets_hooks *hooks, char *err,
                                     size_t errlen);
void sp_budgets_destroy(struct sp_budgets **b);

/* sp_budgets_key_set: add or replace a key (from a key: record; borrowed). A key beyond
 * keys_max is not tracked (counted). Its period is rounded up to whole minutes and capped at
 * SP_BUDGET_LIFETIME_S. sp_budgets_key_delete: forget it. Consumer thread. */
int sp_budgets_key_set(struct sp_budgets *b, const struct sp_pg_key *k);
void sp_budgets_key_delete(struct sp_budgets *b, const char *key_hash);

/* What a control topic record is to spend-svc (sp_budgets_record_decode). */
enum sp_record_kind {
    SP_RECORD_SKIP = 0,       /* not a key: record (block: records included): not mirrored */
    SP_RECORD_KEY_PUT = 1,    /* key: record with a value: k holds the key */
    SP_RECORD_KEY_DELETE = 2, /* key: tombstone: k->key_hash names the key */
};

/* sp_budgets_record_decode: one control topic record (proto_control.h: record key of keylen
 * bytes, value of len bytes or NULL for a tombstone) as spend-svc mirrors it into k (caller
 * storage, zeroed first): the fields of proto_ctl_key_decode, others ignored. For a PUT,
 * *metadata is new (free()) JSON text of the metadata object, or NULL, and k->metadata_json
 * points to it. Returns an enum sp_record_kind, or TG_EINVAL (logged, rate-limited) for a
 * record key of the schema whose hash is not a SHA-256 hex, or a key: value proto refuses (the
 * caller skips it). Any thread. */
int sp_budgets_record_decode(const char *key, size_t keylen, const void *value, size_t len,
                             struct sp_pg_key *k, char **metadata);

/* Team budgets mirrored from team: records, at most. */
#define SP_BUDGET_TEAMS_MIRROR_MAX 10000

/* sp_budgets_team_record: a control topic record; when it is a team:<id> record
 * (proto_control.h) its budget is mirrored (max_budget, budget_duration; a tombstone or a team
 * without a budget removes it). Returns 1 when it was a team record (applied, or refused and
 * logged rate-limited), 0 when it is not one (the caller goes on). Consumer thread. */
int sp_budgets_team_record(struct sp_budgets *b, const char *key, size_t keylen,
                           const void *value, size_t len);

/* sp_budgets_load_blocked: read the published blocks from budget_state (at start). */
int sp_budgets_load_blocked(struct sp_budgets *b, struct sp_pg *pg);

/* sp_budgets_after_batch: check the keys and teams of incr (borrowed) against their budgets.
 * now_ms is epoch ms. Returns 0 or a Postgres error (checked again after the next batch).
 * Consumer thread. */
int sp_budgets_after_batch(struct sp_budgets *b, struct sp_pg *pg, const struct sp_pg_incr *incr,
                           int n, int64_t now_ms);

/* sp_budgets_tick: lift blocks whose period ended. Call every check interval. Consumer thread. */
int sp_budgets_tick(struct sp_budgets *b, struct sp_pg *pg, int64_t now_ms);

/* For redis_sink: period in seconds of a key (by_team 0) or team (1), 0 when no budget; and
 * the list of subjects with a budget. Any thread (internal lock). */
int64_t sp_budgets_period_of(void *b, int by_team, const char *subject);
int sp_budgets_list(void *b, int by_team, char (*subject)[SP_PG_SUBJECT_MAX], int64_t *period_s,
                    int cap);

/* sp_budgets_write_metrics: keys tracked, blocks published, crossings. Any thread. */
void sp_budgets_write_metrics(struct sp_budgets *b, struct tg_buf *buf);

#endif
