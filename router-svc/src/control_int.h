/* control_int: the control store's state and the helpers shared by its source files (control.c:
 * Kafka, replay, publish; control_snapshot.c: the snapshot file). Private to rt_control. */
#ifndef RT_CONTROL_INT_H
#define RT_CONTROL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "control.h"

#define SNAP_MAGIC "tollgate-keys-snapshot v1"
#define SNAP_TEAMS_MAGIC "tollgate-teams-snapshot v1"
#define SNAP_LINE_MAX (RT_KEY_JSON_MAX + 128) /* one snapshot line, bytes incl. newline */
_Static_assert(RT_TEAM_JSON_MAX + 3 < SNAP_LINE_MAX, "a team line fits a snapshot line");


/* A pending publish. Guarded by ctl->mu. */
struct pslot {
    int in_use;
    int answered; /* done already called (by the backstop timer) */
    rt_control_done_fn done;
    void *ud;
    uint64_t deadline_ms; /* monotonic */
    uint32_t next_free;
};

/* An own change applied on confirmation whose record the consumer has not read yet. */
struct echo {
    int is_block;
    char hash[TG_SHA256_HEX_LEN + 1];
    int32_t partition;
    int64_t offset;
};

struct part {
    int32_t id;
    int64_t end;  /* high watermark when assigned: replay ends at this offset */
    int64_t next; /* offset after the last record consumed, -1 before the first */
    int done;
};

struct seen {
    uint64_t a, b; /* first 32 hex digits of the hash, a|b != 0 when used */
    unsigned flags;
};

struct rt_control {
    struct rt_keys *keys;
    struct rt_teams *teams;      /* may be NULL */
    struct rt_team_spec *team_spec; /* control thread: one decoded team record */
    char topic[RT_TOPIC_CAP];
    char snap_path[RT_PATH_CAP];
    char snap_tmp[RT_PATH_CAP + 8];
    uint32_t timeout_ms;
    uint32_t max_pending;
    size_t max_keys;

    size_t n_static;
    char (*statics)[TG_SHA256_HEX_LEN + 1]; /* sorted */

    rd_kafka_t *prod;
    rd_kafka_topic_t *prod_topic;
    /* prod and prod_topic are replaced by the control thread after a fatal error (write lock);
     * produce() uses them under the read lock. */
    pthread_rwlock_t prod_lk;
    rd_kafka_conf_t *prod_conf;   /* what a new producer instance is made from */
    _Atomic int prod_fatal;       /* the producer reported a fatal error */
    uint64_t prod_renew_ms;       /* control thread: monotonic ms of the last new instance */
    rd_kafka_t *cons;
    rd_kafka_queue_t *cons_queue; /* to wake the control thread out of a consumer poll */

    pthread_t thread;
    int thread_started;
    _Atomic int stop;
    _Atomic int stopping; /* publish refuses new records */
    _Atomic int replayed;
    _Atomic int kafka_up;

    pthread_mutex_t mu; /* pending slots */
    struct pslot *slots;
    uint32_t free_head;
    uint32_t n_pending;

    /* Control thread only. */
    int assigned;
    uint64_t next_assign_ms;
    int n_parts;
    struct part parts[RT_CONTROL_PARTITIONS_MAX];
    struct echo *echoes; /* RT_CONTROL_ECHO_MAX, first n_echo used */
    size_t n_echo;
    struct seen *seen; /* replay only */
    size_t seen_slots, seen_count, seen_cap;
    int seen_overflow;
    struct rt_key_spec *specs; /* batch_cap entries */
    struct rt_key_change *changes;
    size_t batch_cap; /* RT_CONTROL_REPLAY_BATCH until replayed, then RT_CONTROL_APPLY_BATCH */
    struct rt_key_spec *own_spec;
    uint64_t snap_gen;     /* keys generation in the last snapshot written or loaded */
    uint64_t snap_next_ms; /* monotonic time before which no periodic write happens */
    int snap_ok;           /* 1: a snapshot file was loaded intact at start */
    uint64_t created_ms;   /* monotonic */
    char *line;            /* SNAP_LINE_MAX */
    char tsnap_path[RT_PATH_CAP];     /* "" = teams not snapshotted */
    char tsnap_tmp[RT_PATH_CAP + 8];
    uint64_t tsnap_gen;               /* teams generation in the last teams snapshot */
    char (*tsnap_ids)[RT_TEAM_ID_CAP]; /* teams loaded from the file, sorted; until reconciled */
    unsigned char *tsnap_seen;        /* per tsnap_ids entry: 1 once a topic record named it */
    size_t tsnap_n;                   /* entries in tsnap_ids (<= max_teams) */

    _Atomic uint64_t records_applied, records_skipped, records_invalid, apply_errors;
    _Atomic uint64_t publish_ok, publish_failed, publish_full, publish_unavailable;
    _Atomic uint64_t producer_renewals;
    _Atomic uint64_t echo_dropped, snapshot_keys, snapshot_loaded, snapshot_writes, snapshot_errors;
    _Atomic uint64_t snapshot_teams, snapshot_teams_loaded, snapshot_teams_writes;
    _Atomic uint64_t snapshot_teams_errors, snapshot_teams_dropped;
};

/* rt_control_hash_ok: 1 when h is 64 lowercase hex digits and a NUL. */
int rt_control_hash_ok(const char *h);

/* rt_control_is_static: 1 when hash is a static key of the config (never replaced by key:
 * records, never written to the snapshot). */
int rt_control_is_static(const struct rt_control *ctl, const char *hash);

/* rt_control_apply_changes: apply n changes to the keys table: one batch, or one by one when the
 * batch is refused (counted in records_applied / apply_errors). Control thread, or create. */
void rt_control_apply_changes(struct rt_control *ctl, const struct rt_key_change *ch, size_t n);

/* rt_control_snapshot_load: load the snapshot file into the keys table (control_snapshot.c).
 * A missing file is not an error; an unreadable or corrupt one is counted, logged and ignored.
 * rt_control_create, before the control thread starts. */
void rt_control_snapshot_load(struct rt_control *ctl);

/* rt_control_maybe_snapshot: write the snapshot file when the table changed since the last one
 * and the throttle allows it (force: now, whether changed or not). Never before the replay is
 * complete. Control thread, or destroy after the thread stopped. */
void rt_control_maybe_snapshot(struct rt_control *ctl, uint64_t now, int force);

/* rt_control_teams_snapshot_load: load the teams snapshot file into the teams table and remember
 * the ids loaded (for rt_control_teams_reconcile). Missing file: nothing; unreadable, corrupt or
 * more teams than the table holds: counted (snapshot_teams_errors), logged, ignored.
 * rt_control_create, before the control thread starts. */
void rt_control_teams_snapshot_load(struct rt_control *ctl);

/* rt_control_teams_note: a record of the topic named team id (a put or a tombstone, decoded):
 * its state is the topic's from now on, so the reconcile leaves it alone. Control thread. */
void rt_control_teams_note(struct rt_control *ctl, const char *id);

/* rt_control_teams_reconcile: end of the replay: remove the teams loaded from the snapshot that
 * no record of the topic named (counted in snapshot_teams_dropped), then forget the loaded ids.
 * Control thread. */
void rt_control_teams_reconcile(struct rt_control *ctl);

/* rt_control_teams_forget: free the loaded ids (destroy; accepts none loaded). */
void rt_control_teams_forget(struct rt_control *ctl);

#endif
