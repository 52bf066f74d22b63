/* proto_control: the records of the control topic (tollgate.control.v1), shared by router-svc
 * (which writes keys and reads everything) and spend-svc (which writes budget blocks and mirrors
 * keys). The topic is compacted: the record key names the subject, the latest value is its
 * state, a tombstone (no value) removes it.
 *
 *   key:<sha256 hex>    a virtual key. Value: the key's stored JSON object, written whole by
 *                       router-svc (keys.h: rt_key_spec_to_json); the fields both services read
 *                       are decoded here (proto_ctl_key_decode). Tombstone: the key is deleted.
 *   block:<sha256 hex>  a budget block of that key. Value: a JSON object (proto_ctl_block);
 *                       readers skip members they do not know. Tombstone: the block is lifted.
 *   team:<team id>      a team (LiteLLM's /team/new). Value: the team's stored JSON object,
 *                       written whole by router-svc (teams.h: rt_team_spec_to_json); the fields
 *                       both services read are decoded here (proto_ctl_team_decode). Tombstone:
 *                       the team is deleted. A team id is 1 to 64 bytes of letters, digits and
 *                       "-_.:@" (PROTO_CTL_TEAM_ID_MAX); proto_ctl_parse_key does not know this
 *                       kind (older readers skip it): proto_ctl_parse_team_key does.
 *
 * Any other record key is not of this schema: both services skip it (TG_ENOTFOUND from
 * proto_ctl_parse_key). A record key of this schema whose hash is not 64 lowercase hex digits
 * is refused (TG_EINVAL) by both. Golden vectors: tests/golden/control (README there).
 *
 * Threads: pure functions; no state. */
#ifndef PROTO_CONTROL_H
#define PROTO_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "proto_event.h"

#define PROTO_CTL_KEY_PREFIX "key:"
#define PROTO_CTL_BLOCK_PREFIX "block:"
#define PROTO_CTL_TEAM_PREFIX "team:"
#define PROTO_CTL_TEAM_ID_MAX 64       /* team id, bytes (without NUL) */
#define PROTO_CTL_TEAM_VALUE_MAX 65536 /* a team value decoders accept, bytes */
#define PROTO_CTL_HASH_LEN 64          /* SHA-256, lowercase hex */
#define PROTO_CTL_RECORD_KEY_MAX 80    /* "block:" + 64 hex + NUL fits */
#define PROTO_CTL_REASON_CAP 64        /* block reason, bytes incl. NUL */
#define PROTO_CTL_SCOPE_CAP 8          /* "key", "team", bytes incl. NUL */
#define PROTO_CTL_BLOCK_JSON_MAX 512   /* an encoded block value, bytes incl. NUL */
#define PROTO_CTL_BLOCK_VALUE_MAX 4096 /* a block value decoders accept, bytes */

enum proto_ctl_kind {
    PROTO_CTL_KEY = 1,   /* key:<hash> */
    PROTO_CTL_BLOCK = 2, /* block:<hash> */
};

/* proto_ctl_record_key: "key:<hash>" or "block:<hash>" into out (cap bytes). Returns its length,
 * or TG_EINVAL (unknown kind, hash not 64 lowercase hex, or cap too small). */
int proto_ctl_record_key(enum proto_ctl_kind kind, const char *hash, char *out, size_t cap);

/* proto_ctl_parse_key: the kind and hash of a record key (rkey[0, len), not NUL-terminated).
 * Returns 0; TG_ENOTFOUND when it is not a record key of this schema (NULL included); or
 * TG_EINVAL with the problem in err when the hash is not 64 lowercase hex digits. */
int proto_ctl_parse_key(const char *rkey, size_t len, enum proto_ctl_kind *kind,
                        char hash[PROTO_CTL_HASH_LEN + 1], char *err, size_t errlen);

/* A budget block's value. Written by spend-svc when a budget is crossed (with the scope and
 * figures), by router-svc for an admin's block (the first three members only). */
struct proto_ctl_block {
    char reason[PROTO_CTL_REASON_CAP]; /* "budget_exceeded"; printable ASCII, no '"' or '\\' */
    int64_t since_ms;                  /* epoch ms the block started, >= 0 */
    int64_t until_ms;                  /* epoch ms the period ends, 0 = open-ended */
    char scope[PROTO_CTL_SCOPE_CAP];   /* "key" or "team" (whose budget); "" = not given */
    int64_t period_start_ms;           /* budget period's start, epoch ms; -1 = not given */
    int64_t spend_nusd;                /* spend that crossed the budget; -1 = not given */
    int64_t max_budget_nusd;           /* the budget; -1 = not given */
};

/* proto_ctl_block_init: reason "", times 0, scope "", figures -1 (not given). */
void proto_ctl_block_init(struct proto_ctl_block *b);

/* proto_ctl_block_encode: the block as compact JSON (members in the order of the struct; the
 * optional ones only when given) into out, NUL-terminated, *outlen bytes. Returns 0; TG_EINVAL
 * for a reason that is empty or has a byte outside printable ASCII or '"' or '\\', a negative
 * time, a scope other than "", "key", "team", or a figure below -1; TG_ETOOBIG when cap is too
 * small (PROTO_CTL_BLOCK_JSON_MAX always suffices). */
int proto_ctl_block_encode(const struct proto_ctl_block *b, char *out, size_t cap,
                           size_t *outlen);

/* proto_ctl_block_decode: a block value (at most PROTO_CTL_BLOCK_VALUE_MAX bytes). Members
 * not listed in the struct are skipped. Returns 0, or TG_EINVAL with the problem in err naming
 * the member ("since_ms: expected a whole number >= 0"). What decodes encodes again (a
 * fixpoint). */
int proto_ctl_block_decode(const char *value, size_t len, struct proto_ctl_block *b, char *err,
                           size_t errlen);

/* The fields of a key record that both services read. */
struct proto_ctl_key {
    char key_hash[PROTO_CTL_HASH_LEN + 1];
    char key_alias[PROTO_NAME_CAP]; /* "" when none */
    char team_id[PROTO_NAME_CAP];   /* "" when none */
    char user_id[PROTO_NAME_CAP];   /* "" when none */
    int64_t max_budget_nusd;        /* -1 when the key has no budget */
    int64_t budget_duration_s;      /* 0 when none */
    char *metadata_json;            /* the metadata object as compact JSON (malloc'd), or NULL */
};

/* proto_ctl_key_decode: the value of key:<hash> (hash as parsed from the record key). Reads
 * key_alias, team_id, user_id (strings or null, each at most PROTO_NAME_CAP - 1 bytes),
 * max_budget_nusd (whole number; negative or null: no budget), budget_duration_s (whole number;
 * 0, negative or null: none) and metadata (an object, kept as text); LiteLLM's names
 * max_budget (USD) and budget_duration ("30d", tg_units' grammar) are read when the stored
 * names are absent. A key_hash member must equal hash. Every other member is router-svc's alone
 * and skipped. Returns 0 (free k with proto_ctl_key_fini), or TG_EINVAL with the problem in
 * err (k then holds nothing to free). */
int proto_ctl_key_decode(const char *hash, const char *value, size_t len, struct proto_ctl_key *k,
                         char *err, size_t errlen);

/* proto_ctl_key_fini: frees metadata_json (k may be all zeroes). */
void proto_ctl_key_fini(struct proto_ctl_key *k);

/* ---- teams ---- */

/* proto_ctl_team_id_ok: 1 when id (NUL-terminated) is a valid team id: 1 to
 * PROTO_CTL_TEAM_ID_MAX bytes of A-Z a-z 0-9 and "-_.:@". */
int proto_ctl_team_id_ok(const char *id);

/* proto_ctl_team_record_key: "team:<id>" into out (cap bytes). Returns its length, or TG_EINVAL
 * (id not valid, or cap too small; PROTO_CTL_RECORD_KEY_MAX always suffices). */
int proto_ctl_team_record_key(const char *id, char *out, size_t cap);

/* proto_ctl_parse_team_key: the team id of a record key "team:<id>" (rkey[0, len), not
 * NUL-terminated). Returns 0; TG_ENOTFOUND when it is not a team record key (NULL included); or
 * TG_EINVAL with the problem in err when the id is not valid. */
int proto_ctl_parse_team_key(const char *rkey, size_t len, char id[PROTO_CTL_TEAM_ID_MAX + 1],
                             char *err, size_t errlen);

/* The fields of a team record that both services read. */
struct proto_ctl_team {
    char team_id[PROTO_CTL_TEAM_ID_MAX + 1];
    char team_alias[PROTO_NAME_CAP]; /* "" when none */
    int64_t max_budget_nusd;         /* -1 when the team has no budget */
    int64_t budget_duration_s;       /* 0 when none */
    int blocked;                     /* 1: blocked by an admin (/team/block) */
};

/* proto_ctl_team_decode: the value of team:<id> (id as parsed from the record key; at most
 * PROTO_CTL_TEAM_VALUE_MAX bytes). Reads team_alias (string or null, at most PROTO_NAME_CAP - 1
 * bytes), max_budget_nusd / max_budget, budget_duration_s / budget_duration (as for keys) and
 * blocked (true, false or null). A team_id member must equal id. Every other member is
 * router-svc's alone and skipped (its limits, models, metadata, and "extra": the LiteLLM fields
 * it keeps without acting on them). Returns 0, or TG_EINVAL with the problem in err naming the
 * member. */
int proto_ctl_team_decode(const char *id, const char *value, size_t len, struct proto_ctl_team *t,
                          char *err, size_t errlen);

#endif
