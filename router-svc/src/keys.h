/* keys: the virtual keys table. SHA-256 hex of the bearer token -> immutable key record.
 *
 * Publication (RCU-style, reference counted):
 * - A struct rt_keys_table is an immutable snapshot: records never change after publication.
 * - struct rt_keys holds the current snapshot. Readers (request threads) call
 *   rt_keys_acquire(), which takes a short internal lock only to load the pointer and increment
 *   the snapshot's reference count (a few instructions), look keys up without any lock, and call
 *   rt_keys_release() when the request no longer needs the record.
 * - Writers (key API, control topic consumer, budget blocks) call rt_keys_apply(): under a
 *   writer mutex (writers serialise among themselves) it builds a complete new snapshot off to
 *   the side, then swaps the current pointer under the short lock and drops the table's own
 *   reference to the old snapshot. The old snapshot is freed by whichever thread releases the
 *   last reference. Readers never wait for a build; a writer waits for readers only during the
 *   pointer swap.
 * - Records are shared between successive snapshots (each record is reference counted), so a
 *   change costs one copy of the index (8 bytes per key), not of every record. Batch changes
 *   (control topic replay) through one rt_keys_apply call with many changes.
 *
 * Bounds: the number of keys is capped at creation (max_keys, config tollgate.limits.max_keys,
 * default RT_DEFAULT_MAX_KEYS). A change that would exceed it fails with TG_EFULL, is not
 * applied, and is counted in stats.full_rejections. Block marks for unknown hashes are kept (a
 * block may arrive before its key on the control topic) within the same capacity. */
#ifndef RT_KEYS_H
#define RT_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* A key-level fallback rule: group -> targets. Strings point into the record. */
struct rt_key_fallback {
    const char *group;
    uint32_t n_targets;
    const char *const *targets;
};

/* A key-level alias: alias -> group. */
struct rt_key_alias {
    const char *alias;
    const char *group;
};

/* A key-level per-group limit. */
struct rt_key_group_limit {
    const char *group;
    int64_t rpm; /* RT_LIMIT_NONE when not set */
    int64_t tpm; /* RT_LIMIT_NONE when not set */
};

/* An immutable key record. Every pointer points into the record's own allocation: the whole
 * record is valid while the caller holds a reference to a snapshot that contains it. Strings are
 * "" when absent, never NULL. Field meaning: see struct rt_key_spec in config.h. */
struct rt_key {
    char hash[TG_SHA256_HEX_LEN + 1];
    const char *key_alias;
    const char *team_id;
    const char *user_id;
    uint32_t n_models; /* 0 = every group and alias allowed */
    const char *const *models;
    int64_t max_budget_nusd;
    int64_t budget_duration_s;
    int64_t rpm_limit;
    int64_t tpm_limit;
    int64_t max_parallel_requests;
    uint32_t n_group_limits;
    const struct rt_key_group_limit *group_limits;
    int disable_fallbacks;
    uint32_t n_tags;
    const char *const *tags;
    int has_fallbacks; /* 0: absent/null -> global fallbacks; 1: use fallbacks[] (may be empty) */
    uint32_t n_fallbacks;
    const struct rt_key_fallback *fallbacks;
    uint32_t n_aliases;
    const struct rt_key_alias *aliases;
    int32_t num_retries;      /* -1 = global */
    int64_t expires_epoch_ms; /* 0 = never; the caller compares with the wall clock */
    int blocked;              /* 1: budget exceeded (block:<hash> on the control topic) */
    int admin_blocked;        /* 1: blocked by an admin (/key/block), in the key's record */
    const char *extra;        /* LiteLLM fields stored, not acted on (key_extra.h); "" = none */
};

struct rt_keys;
struct rt_keys_table;

enum rt_key_op {
    RT_KEY_PUT = 0,     /* add or replace the record for spec->key_hash (keeps a block mark) */
    RT_KEY_DELETE = 1,  /* remove the record (and its block mark); unknown hash: no-op */
    RT_KEY_BLOCK = 2,   /* set the block mark for hash (record present or not) */
    RT_KEY_UNBLOCK = 3, /* clear the block mark */
};

/* One change for rt_keys_apply. */
struct rt_key_change {
    enum rt_key_op op;
    char hash[TG_SHA256_HEX_LEN + 1]; /* target hash; for PUT, spec->key_hash is used */
    const struct rt_key_spec *spec;   /* borrowed, PUT only (copied into a new record) */
};

struct rt_keys_stats {
    uint64_t count;           /* records in the current snapshot */
    uint64_t blocked;         /* block marks in the current snapshot */
    uint64_t capacity;        /* max_keys */
    uint64_t generation;      /* snapshots published so far (1 after create) */
    uint64_t full_rejections; /* rt_keys_apply calls refused with TG_EFULL */
};

/* rt_keys_create: a key store whose first snapshot holds the n static keys of specs (borrowed,
 * copied; may be NULL when n == 0), capped at max_keys (>= 1). Returns a new store (caller
 * destroys with rt_keys_destroy) or NULL with a message in err (duplicate hash, n > max_keys,
 * out of memory). Main thread. */
struct rt_keys *rt_keys_create(const struct rt_key_spec *specs, size_t n, size_t max_keys,
                               char *err, size_t errlen);

/* rt_keys_destroy: free the store and its current snapshot reference; sets *keys to NULL.
 * Snapshots still acquired by readers stay valid until released. Accepts NULL. Call after every
 * thread that may call rt_keys_acquire has stopped. */
void rt_keys_destroy(struct rt_keys **keys);

/* rt_keys_acquire: a new reference to the current snapshot (never NULL). The caller releases it
 * with rt_keys_release. Any thread; takes the short swap lock only. */
struct rt_keys_table *rt_keys_acquire(struct rt_keys *keys);

/* rt_keys_release: drop a reference; the last one frees the snapshot (and records no longer
 * referenced). Sets *table to NULL; accepts NULL. Any thread, no lock. */
void rt_keys_release(struct rt_keys_table **table);

/* rt_keys_lookup: the record for a bearer token (the raw key, e.g. "sk-..."; len bytes, need not
 * be NUL-terminated): hashes it with SHA-256 and looks the hash up. Returns a borrowed record,
 * valid while the caller holds table, or NULL when unknown. A blocked key is returned (check
 * ->blocked). Any thread, no lock. */
const struct rt_key *rt_keys_lookup(const struct rt_keys_table *table, const char *token,
                                    size_t len);

/* rt_keys_lookup_hash: the same for a SHA-256 hex hash (64 lowercase hex chars). */
const struct rt_key *rt_keys_lookup_hash(const struct rt_keys_table *table, const char *hash);

/* rt_keys_is_blocked_hash: 1 when a block mark exists for hash (record present or not). */
int rt_keys_is_blocked_hash(const struct rt_keys_table *table, const char *hash);

/* rt_keys_count: records in a snapshot. */
size_t rt_keys_count(const struct rt_keys_table *table);

/* rt_keys_foreach: call fn for every entry of a snapshot, in no particular order: present
 * records with present = 1, block marks without a record with present = 0 (key->hash and
 * key->blocked are then the only meaningful fields). fn returns 0 to continue, anything else
 * stops the walk and is returned. For the snapshot file and /key/list style views. The records
 * are borrowed for the call; fn must not release table. Any thread, no lock. */
int rt_keys_foreach(const struct rt_keys_table *table,
                    int (*fn)(const struct rt_key *key, int present, void *arg), void *arg);

/* rt_keys_apply: apply n changes in order, atomically: either every change is in the next
 * published snapshot, or none is (the current snapshot stays). Returns 0; TG_EFULL when the
 * result would hold more than max_keys records+marks (counted); TG_EINVAL for a malformed change
 * (bad hash, PUT without spec, invalid spec strings); TG_ENOMEM. Any thread; serialised with
 * other writers by the writer mutex; readers are not blocked while the snapshot is built. */
int rt_keys_apply(struct rt_keys *keys, const struct rt_key_change *changes, size_t n);

/* rt_keys_get_stats: counters snapshot. Any thread. */
void rt_keys_get_stats(struct rt_keys *keys, struct rt_keys_stats *out);

/* ---- key specs as JSON (key API bodies, control topic values, snapshot lines) ---- */

/* A spec's stored JSON never exceeds this many bytes: the largest valid spec (every string at
 * its capacity, every list at its maximum, all in characters JSON writes as \u00XX, and
 * RT_KEY_EXTRA_MAX_BYTES of stored-only fields) encodes to about 108 KiB (router_keys_test,
 * test_json_stored_worst_case_fits). */
#define RT_KEY_JSON_MAX 131072

enum rt_key_json_form {
    /* Key API body (/key/generate, /key/update): key_alias, models, team_id, user_id,
     * max_budget (USD number), budget_duration ("30d"), rpm_limit, tpm_limit,
     * max_parallel_requests, model_rpm_limit {group: n}, model_tpm_limit {group: n},
     * metadata {disable_fallbacks, tags, other keys ignored}, router_settings
     * {model_group_alias, fallbacks, num_retries}, tags (= metadata.tags) and aliases
     * (= router_settings.model_group_alias; a body gives each list one way only), and the
     * LiteLLM fields Tollgate stores without acting on them (key_extra.h). "key", "duration" and
     * "key_hash" are the caller's business (hashing, expiry, lookup) and are skipped here. */
    RT_KEY_JSON_API = 0,
    /* Stored form written by rt_key_spec_to_json: the fields above with exact integers
     * (max_budget_nusd, budget_duration_s) plus key_hash, expires_epoch_ms, blocked,
     * admin_blocked (written only when set) and extra (the stored-only fields, written last and
     * only when there is one). In the API form, "blocked" is LiteLLM's field: an admin's block
     * (admin_blocked). */
    RT_KEY_JSON_STORED = 1,
};

/* rt_key_spec_init: a spec with no limits, no lists, num_retries -1 (caller storage). */
void rt_key_spec_init(struct rt_key_spec *spec);

/* rt_key_get_spec: the spec a record was built from (for /key/info and /key/update merges).
 * key borrowed; spec is caller storage (about 31 KB). */
void rt_key_get_spec(const struct rt_key *key, struct rt_key_spec *spec);

/* rt_key_spec_from_json: apply the fields present in a JSON object to spec (absent fields keep
 * their value, so an update merges into the current spec; null resets a field to its default,
 * e.g. router_settings.fallbacks: null -> the global list). cfg (borrowed, may be NULL) checks
 * that every model group / alias named exists (models may also name the key's own
 * router_settings.model_group_alias entries, checked on the merged spec when the body has models
 * or router_settings). Returns 0, or TG_EINVAL with err naming the
 * field ("models[2]: unknown model group or alias \"x\"", "rpm_limit: expected a non-negative
 * integer or null", "colour: unknown field"); spec may then be partly updated (parse into a copy
 * when that matters). Any thread. */
int rt_key_spec_from_json(struct rt_key_spec *spec, enum rt_key_json_form form, const char *json,
                          size_t len, const struct rt_config *cfg, char *err, size_t errlen);

/* rt_key_spec_to_json: the stored form (RT_KEY_JSON_STORED) of spec into out (cap bytes,
 * NUL-terminated), length in *outlen. Never contains a raw key (specs hold hashes only).
 * Returns 0, TG_ETOOBIG (cap too small), TG_EINVAL (spec->extra is not the JSON object text
 * rt_key_spec_from_json writes) or TG_ENOMEM. Any thread. */
int rt_key_spec_to_json(const struct rt_key_spec *spec, char *out, size_t cap, size_t *outlen);

/* ---- control topic records (tollgate.control.v1, compacted; record keys: proto_control.h) ----
 * record key "key:<hash>":   value = stored JSON of the spec (PUT); tombstone (no value) = DELETE.
 * record key "block:<hash>": any value (e.g. {"reason":"budget_exceeded"}) = BLOCK;
 *                            tombstone = UNBLOCK.
 * Other record keys are not for the keys table (rt_keys_control_decode returns TG_ENOTFOUND). */

/* rt_keys_control_decode: turn one control record (rkey of rklen bytes; value of len bytes, NULL
 * for a tombstone) into *change. For a PUT, the spec is parsed into *spec (caller storage, about
 * 31 KB) and change->spec points to it; the value's key_hash must match the record key. cfg
 * (may be NULL) validates model names. Returns 0, TG_ENOTFOUND (not a keys record: skip it) or
 * TG_EINVAL with err. Any thread. */
int rt_keys_control_decode(const char *rkey, size_t rklen, const char *value, size_t len,
                           const struct rt_config *cfg, struct rt_key_change *change,
                           struct rt_key_spec *spec, char *err, size_t errlen);

/* rt_key_allows: 1 when the record (NULL = no key: everything allowed) allows the model name
 * (a group or an alias as requested), i.e. its models list is empty or contains name. */
int rt_key_allows(const struct rt_key *key, const char *name);

#endif
