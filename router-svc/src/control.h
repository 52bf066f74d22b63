/* control: the durable, replica-shared store of virtual keys and budget blocks, kept on the
 * compacted Kafka topic tollgate.control.v1 (DESIGN.md), with a local snapshot file.
 *
 * ---- Records (the interface shared with spend-svc; record keys and block values are proto's:
 * proto/proto_control.h, golden vectors in tests/golden/control) ----
 * Kafka record key "key:<sha256hex>" (64 lowercase hex digits of SHA-256 over the raw key):
 *   value = the stored form of the key (rt_key_spec_to_json, RT_KEY_JSON_STORED), one JSON
 *   object, every field always present, never the raw key:
 *     {"key_hash":"<64 hex>","key_alias":"","team_id":"","user_id":"",
 *      "models":["gpt-main"],                         [] = every group and alias allowed
 *      "max_budget_nusd":5000000000,                  integer nano-USD, null = no budget
 *      "budget_duration_s":2592000,                   integer seconds, 0 = no period
 *      "rpm_limit":60,"tpm_limit":null,"max_parallel_requests":null,  null = no limit
 *      "model_rpm_limit":{"gpt-main":1},"model_tpm_limit":{},
 *      "metadata":{"disable_fallbacks":false,"tags":["team-a"]},
 *      "router_settings":{"fallbacks":null,             null = global list; [] = none;
 *                                                       [{"gpt-main":["gpt-fallback"]}]
 *                         "model_group_alias":{"alias-main":"gpt-main"},
 *                         "num_retries":null},          null = global num_retries
 *      "expires_epoch_ms":0,                          0 = never expires
 *      "blocked":false}                               always false in key: records (blocks
 *                                                     travel as block: records)
 *   A reader must reject unknown fields only where it validates (router-svc does: adding a
 *   field is a schema change for every replica); spend-svc mirrors the fields it needs.
 *   Tombstone (NULL value): the key was deleted.
 * Kafka record key "block:<sha256hex>" (written by spend-svc when a budget is exceeded):
 *   value = {"reason":"budget_exceeded","since_ms":<epoch ms>,"until_ms":<epoch ms, 0 = until
 *   unblocked>} and, from spend-svc, "scope", "period_start_ms", "spend_nusd", "max_budget_nusd"
 *   (proto_ctl_block_encode; further fields are allowed and ignored). Any non-NULL value
 *   blocks the key: requests with it get 429 budget_exceeded.
 *   until_ms is informational: the block stays in force until its tombstone (spend-svc writes
 *   the tombstone when the budget period rolls over). A block may arrive before its key.
 *   Tombstone (NULL value): unblock.
 * Kafka record key "team:<team id>" (proto_control.h): value = the team's stored form
 *   (rt_team_spec_to_json); tombstone: the team was deleted. Applied to the teams table
 *   (cc->teams) in topic order; a confirmed own record at once, as keys are.
 * Records with other keys are skipped. Records are keyed, so every change of one key lands on
 * one partition, in order.
 *
 * ---- Producer ----
 * acks=all, enable.idempotence=true, message.timeout.ms = publish_timeout_ms.
 * rt_control_publish() is asynchronous: the record is queued and done(status, ud) is called
 * exactly once, on the control thread: 0 when the brokers confirmed it (after the change was
 * applied to this replica's keys table, so the caller's answer is consistent), TG_EUNAVAIL when
 * it failed or was not confirmed within publish_timeout_ms (plus at most one poll interval:
 * a backstop timer enforces the bound even if librdkafka is late). A record that failed may
 * still reach the topic later (a late delivery after the timeout); every replica then applies
 * it like any other record, so replicas never diverge.
 * Pending publishes are bounded by max_pending: TG_EFULL when full (done is not called).
 *
 * ---- Consumer ----
 * No consumer group membership (every replica needs every record): all partitions are
 * assigned from OFFSET_BEGINNING and read until the high watermarks seen when the assignment
 * was made; then the store is "replayed" (rt_control_replayed; readiness waits for it) and
 * keeps tailing. Records are applied to the keys table in batches of up to
 * RT_CONTROL_REPLAY_BATCH (replay) or RT_CONTROL_APPLY_BATCH (tailing) changes per
 * rt_keys_apply (each call copies the table's index, so the replay uses large batches). At the end
 * of the replay, entries that came from the snapshot file but are no longer on the topic (their
 * tombstones compacted away) are removed, so the table equals config keys + topic state. Changes
 * this replica applied early (on confirmation) are not overwritten by older records of the same key
 * read afterwards. Static keys (tollgate.keys in the config) are never replaced or deleted by key:
 * records (counted as skipped); block: records do apply to them.
 *
 * ---- Snapshot file ----
 * Loaded synchronously by rt_control_create, before Kafka is contacted, so existing keys
 * authenticate while Kafka is unreachable. Written atomically (temporary file, fsync, rename,
 * fsync of the directory) after the replay and after changes, at most every
 * RT_CONTROL_SNAPSHOT_INTERVAL_MS (and at most a fifth of the control thread's time: a large
 * table stretches the interval), and on destroy. Never written before the first replay is
 * complete (the file on disk is then still the best state known). Contents: hashes and key
 * settings only (never a raw key); at most the keys table capacity entries. Format (text):
 *   tollgate-keys-snapshot v1 entries=<n> written_ms=<epoch ms>
 *   K <stored JSON of a key record>          one per non-static key
 *   B <sha256hex>                            one per block mark not carried by a K line
 *   END <n> <crc32c of every byte before this line, 8 hex digits>
 * A file that fails the check is ignored as a whole (logged); the replay rebuilds the state.
 * Teams (with a teams table and teams_snapshot_path) go to a second file, teams.snapshot next to
 * the keys', written the same way (atomically, when the teams table changed, under the same
 * throttle) and loaded at create, so that a replica restarted while Kafka is unreachable still
 * enforces its teams' blocks, models and limits. A separate file keeps the keys file readable by
 * earlier versions. At most the teams table capacity (limits.max_teams) entries; a file with
 * more, or one that fails its check, is ignored as a whole (logged, counted). Format (text):
 *   tollgate-teams-snapshot v1 written_ms=<epoch ms>
 *   T <stored JSON of a team record>         one per team (rt_team_spec_to_json)
 *   END <n> <crc32c of every byte before this line, 8 hex digits>
 * At the end of the replay, teams loaded from the file that no record of the topic mentioned
 * (deleted while this replica was down, tombstone compacted away) are removed, as keys are.
 *
 * Threads: one control thread owns the consumer, serves the producer's delivery reports, runs
 * the backstop timer and writes the snapshot. rt_control_publish may be called from any thread.
 */
#ifndef RT_CONTROL_H
#define RT_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "keys.h"
#include "proto_control.h"
#include "teams.h"
#include "tg_buf.h"

#define RT_CONTROL_PUBLISH_TIMEOUT_MS 5000u   /* default bound of one publish */
#define RT_CONTROL_RENEW_MS 1000u   /* a producer with a fatal error is replaced at most this often */
#define RT_CONTROL_PENDING_DEFAULT 256u       /* default pending publishes capacity */
#define RT_CONTROL_PENDING_MAX 65536u         /* largest accepted max_pending */
#define RT_CONTROL_SNAPSHOT_INTERVAL_MS 1000u /* snapshot writes at most this often */
#define RT_CONTROL_APPLY_BATCH 128u           /* consumed changes per rt_keys_apply */
/* Changes per rt_keys_apply while replaying and loading the snapshot: 512 decoded specs,
 * about 7 MB, freed when the replay is complete. */
#define RT_CONTROL_REPLAY_BATCH 512u
#define RT_CONTROL_PARTITIONS_MAX 256       /* control topic partitions followed */
#define RT_CONTROL_ECHO_MAX 4096u           /* own confirmed changes awaiting their echo */
#define RT_CONTROL_RETRY_MS 1000u           /* metadata / assignment retry interval */
#define RT_CONTROL_DEGRADED_READY_MS 10000u /* snapshot-only readiness after this long */
#define RT_CONTROL_RECORD_KEY_MAX PROTO_CTL_RECORD_KEY_MAX /* "block:" + 64 hex + NUL fits */

struct rt_control;
struct tg_kafka_opts;

struct rt_control_config {
    const char *brokers;         /* bootstrap list; NULL or "" = no Kafka: the snapshot is
                                  * loaded, nothing is replayed (rt_control_replayed is 1) and
                                  * every publish returns TG_EUNAVAIL */
    const char *topic;           /* NULL = RT_DEFAULT_CONTROL_TOPIC */
    const struct tg_kafka_opts *kafka_opts; /* security and librdkafka properties, applied
                                             * after the control's own; NULL = none
                                             * (borrowed during create) */
    const char *snapshot_path;   /* NULL or "" = no snapshot file */
    uint32_t publish_timeout_ms; /* 0 = RT_CONTROL_PUBLISH_TIMEOUT_MS */
    uint32_t max_pending;        /* 0 = RT_CONTROL_PENDING_DEFAULT; <= RT_CONTROL_PENDING_MAX */
    const struct rt_config *cfg; /* borrowed, outlives the control (may be NULL): its static
                                  * keys are protected from key: records and not written to
                                  * the snapshot */
    struct rt_teams *teams;      /* borrowed, outlives the control (may be NULL: team: records
                                  * are then skipped): team: records are applied to it */
    const char *teams_snapshot_path; /* NULL or "" = teams are not snapshotted (main.c:
                                      * "<spool dir>/teams.snapshot"); needs teams */
};

/* One change to publish. */
struct rt_control_record {
    enum rt_key_op op;                /* PUT, DELETE, BLOCK, UNBLOCK */
    char hash[TG_SHA256_HEX_LEN + 1]; /* target; for PUT it must equal spec->key_hash */
    const struct rt_key_spec *spec;   /* PUT only; borrowed for the call (encoded at once) */
    struct proto_ctl_block block;     /* BLOCK only (proto_ctl_block_init, then reason and times) */
};

/* Called exactly once per accepted publish, on the control thread (or on the thread running
 * rt_control_destroy's shutdown of the control thread, which is the control thread too).
 * status: 0 confirmed (and applied locally), TG_EUNAVAIL not confirmed. Must not block for
 * long and must not call rt_control_destroy. */
typedef void (*rt_control_done_fn)(int status, void *ud);

struct rt_control_stats {
    uint64_t records_applied;     /* records applied to the keys table (consumed + own) */
    uint64_t records_skipped;     /* not keys records, stale echoes, static keys */
    uint64_t records_invalid;     /* undecodable key: values (logged, skipped) */
    uint64_t apply_errors;        /* changes the keys table refused (full, invalid) */
    uint64_t publish_ok;          /* confirmed */
    uint64_t publish_failed;      /* broker error or timeout (done got TG_EUNAVAIL) */
    uint64_t publish_full;        /* refused: pending queue full */
    uint64_t publish_unavailable; /* refused at once: no brokers, stopping, produce error */
    uint64_t pending;             /* publishes awaiting confirmation now */
    uint64_t producer_renewals;   /* producer instances replaced after a fatal error */
    uint64_t echo_dropped;        /* own changes forgotten before their echo (capacity) */
    uint64_t snapshot_keys;       /* entries in the last snapshot written or loaded */
    uint64_t snapshot_loaded;     /* entries loaded from the snapshot at start */
    uint64_t snapshot_writes;     /* snapshot files written */
    uint64_t snapshot_errors;     /* snapshot files that could not be written or read */
    uint64_t snapshot_teams;      /* teams in the last teams snapshot written or loaded */
    uint64_t snapshot_teams_loaded; /* teams loaded from the teams snapshot at start */
    uint64_t snapshot_teams_writes; /* teams snapshot files written */
    uint64_t snapshot_teams_errors; /* teams snapshot files not written, unreadable or corrupt */
    uint64_t snapshot_teams_dropped; /* snapshot teams removed by the end-of-replay reconcile */
    int replayed;                 /* 1 once the topic was read up to the start watermarks */
    int kafka_up;                 /* 1 when the last word from the brokers was good */
};

/* rt_control_create: load the snapshot file (when configured and present) into keys, then,
 * when brokers are configured, create the producer and the consumer and start the control
 * thread. Kafka being unreachable is not an error. keys is borrowed and must outlive the
 * control. Returns a new control (rt_control_destroy) or NULL with a message in err (bad
 * configuration, out of memory; an unreadable or corrupt snapshot is logged and ignored, not an
 * error). Main thread. */
struct rt_control *rt_control_create(const struct rt_control_config *cc, struct rt_keys *keys,
                                     char *err, size_t errlen);

/* rt_control_stop: stop the control thread: pending publishes are purged and every pending
 * done is called (TG_EUNAVAIL) before this returns; later rt_control_publish calls return
 * TG_EUNAVAIL at once. The handle stays valid (publish, stats, metrics) until
 * rt_control_destroy. Idempotent. Main thread. Shutdown order: stop accepting requests ->
 * rt_control_stop (admin requests still waiting get their 503 while the HTTP front can still
 * answer them) -> stop the HTTP front -> rt_control_destroy. */
void rt_control_stop(struct rt_control *ctl);

/* rt_control_destroy: rt_control_stop if not done, write a last snapshot when the state changed
 * since the last one, free. Accepts NULL; sets *ctl to NULL. Main thread, after every caller of
 * rt_control_publish has stopped. */
void rt_control_destroy(struct rt_control **ctl);

/* rt_control_publish: queue one change for the control topic. Returns 0 (done will be called
 * exactly once, later, on the control thread), TG_EFULL (max_pending publishes are waiting;
 * counted), TG_EUNAVAIL (no brokers configured, stopping, or the producer refused it), or
 * TG_EINVAL (bad record). done is not called when the return is not 0. rec is borrowed for the
 * call. Any thread; takes the pending-slots mutex briefly; never waits for Kafka. */
int rt_control_publish(struct rt_control *ctl, const struct rt_control_record *rec,
                       rt_control_done_fn done, void *ud);

/* rt_control_publish_team: queue a team: record (proto_control.h): spec's stored form
 * (rt_team_spec_to_json), or a tombstone for team id when spec is NULL. Confirmed records are
 * applied to the teams table before done(0) (as keys are), and every replica applies them when
 * it reads them. Returns and calls done as rt_control_publish does (TG_EINVAL: bad id or spec,
 * or no teams table). The teams table is written to the teams snapshot file (see "Snapshot
 * file") like keys. Any thread; never waits for Kafka. */
int rt_control_publish_team(struct rt_control *ctl, const char *id,
                            const struct rt_team_spec *spec, rt_control_done_fn done, void *ud);

/* rt_control_replayed: 1 once the topic was read up to the high watermarks seen at assignment
 * (always 1 without brokers). Readiness waits for it. Any thread. */
int rt_control_replayed(const struct rt_control *ctl);

/* rt_control_ready: what /health/readiness should report for the key store: 1 once replayed;
 * also 1 (degraded: the replica serves the keys of its snapshot) when an intact snapshot file
 * was loaded at start and RT_CONTROL_DEGRADED_READY_MS have passed without a completed replay
 * (Kafka unreachable), so that a restarted replica can take traffic during a Kafka outage.
 * 0 otherwise. Any thread. */
int rt_control_ready(const struct rt_control *ctl);

/* rt_control_wait_replayed: wait (sleeping in 10 ms steps) until replayed or timeout_ms.
 * Returns 0 or TG_ETIMEOUT. For start-up sequencing and tests; never on a request thread. */
int rt_control_wait_replayed(const struct rt_control *ctl, uint32_t timeout_ms);

/* rt_control_get_stats: counters snapshot. Any thread. */
void rt_control_get_stats(const struct rt_control *ctl, struct rt_control_stats *out);

/* rt_control_write_metrics: append tollgate_router_control_records_applied_total,
 * tollgate_router_control_publish_total{outcome="ok|failed|full|unavailable"},
 * tollgate_router_control_replayed, tollgate_router_control_snapshot_keys (and
 * tollgate_router_control_pending); with a teams table, tollgate_router_teams,
 * tollgate_router_teams_full_total, tollgate_router_control_snapshot_teams and
 * tollgate_router_control_snapshot_teams_errors_total. Any thread. */
void rt_control_write_metrics(const struct rt_control *ctl, struct tg_buf *b);

/* rt_control_record_key: "key:<hash>" or "block:<hash>" for rec into out (cap >=
 * RT_CONTROL_RECORD_KEY_MAX). Returns the length, or TG_EINVAL (bad op or hash). */
int rt_control_record_key(const struct rt_control_record *rec, char *out, size_t cap);

#endif
