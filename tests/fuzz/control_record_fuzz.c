/* libFuzzer target for the control topic record codecs (tollgate.control.v1, router-svc
 * control.h): router-svc's decoder (rt_keys_control_decode, keys.h) and encoders
 * (rt_key_spec_to_json, rt_control_record_key, rt_control_block_encode), and spend-svc's key
 * mirror (sp_budgets_record_decode and sp_budgets_key_set, budgets.h).
 *
 * Input: one flags byte, the record key up to the first '\n', the value after it. Flags bit 0
 * makes the record a tombstone (NULL value). The value also gives a block to encode (its first
 * bytes as the reason, the input's hash as the times).
 *
 * Properties (abort on violation):
 *  - router decode answers 0, TG_ENOTFOUND (not a keys record) or TG_EINVAL with a message;
 *    on 0 the operation follows from the record key's prefix and the tombstone, the hash is
 *    64 lowercase hex, rt_control_record_key gives back the record key, and rt_keys_apply takes
 *    the change;
 *  - a decoded key spec encodes within RT_KEY_JSON_MAX, its encoding decodes as the same spec
 *    (every field, the stored-only LiteLLM fields of "extra" included, compared as normalise()
 *    puts it) and encodes to the same bytes (a fixpoint), and
 *    spend-svc reads that stored form with the same alias, team, user, budget and period (the
 *    interface the two services share);
 *  - spend-svc's decoder agrees with router-svc's on which records are key: PUTs and deletes of
 *    a hash, leaves strings terminated, budget >= -1 and period >= 0, metadata as JSON object
 *    text; its key mirror keeps a budget period that is a positive multiple of 60 s;
 *  - rt_control_block_encode refuses exactly the reasons the header rules out, and what it
 *    writes is the JSON object of the block, which router-svc decodes as a BLOCK;
 *  - team: records (teams.h): router-svc's team decoder answers 0, TG_ENOTFOUND (exactly the
 *    records whose key does not start with "team:") or TG_EINVAL with a message; a decoded team
 *    has a valid id that gives back the record key, encodes within RT_TEAM_JSON_MAX, decodes from
 *    that encoding as the same team and encodes to the same bytes; proto reads the stored form
 *    with the same alias, budget, period and block, and the teams table takes it; spend-svc's
 *    team mirror takes exactly the team records. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "budgets.h"
#include "config.h"
#include "control.h"
#include "keys.h"
#include "proto_control.h"
#include "teams.h"
#include "tg_err.h"
#include "tg_log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sp_budgets *mirror; /* spend-svc's key mirror, emptied after every input */
static char enc1[RT_KEY_JSON_MAX], enc2[RT_KEY_JSON_MAX];
static struct rt_key_spec spec, spec2, cmp1, cmp2; /* about 31 KB each */
static struct rt_team_spec team, team2;
static char tenc1[RT_TEAM_JSON_MAX], tenc2[RT_TEAM_JSON_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static struct sp_config cfg;
    char err[256];

    (void)argc;
    (void)argv;
    tg_log_set_level(TG_LOG_OFF);
    sp_config_defaults(&cfg);
    cfg.keys_max = 16;
    mirror = sp_budgets_create(&cfg, NULL, err, sizeof(err));
    if (mirror == NULL)
        abort();
    return 0;
}

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "control_record_fuzz: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    abort();
}

static void check(int ok, const char *what, const char *detail)
{
    if (!ok)
        fail(what, detail);
}

static int is_hash(const char *h)
{
    return strlen(h) == TG_SHA256_HEX_LEN && strspn(h, "0123456789abcdef") == TG_SHA256_HEX_LEN;
}

/* spend-svc's view of a record, checked against its header. */
static int spend_decode(const char *rkey, size_t rklen, const char *value, size_t len,
                        struct sp_pg_key *k, char **metadata)
{
    int rc = sp_budgets_record_decode(rkey, rklen, value, len, k, metadata);

    check(rc == SP_RECORD_SKIP || rc == SP_RECORD_KEY_PUT || rc == SP_RECORD_KEY_DELETE ||
              rc == TG_EINVAL,
          "spend decode: return code outside the contract", NULL);
    check(rc == SP_RECORD_KEY_PUT || *metadata == NULL, "spend decode: metadata without a PUT",
          NULL);
    if (rc == SP_RECORD_SKIP || rc == TG_EINVAL)
        return rc;
    check(rklen > 4 && memcmp(rkey, "key:", 4) == 0,
          "spend decode: a key record without key:", NULL);
    check(strnlen(k->key_hash, sizeof(k->key_hash)) < sizeof(k->key_hash) &&
              strncmp(k->key_hash, rkey + 4, rklen - 4) == 0,
          "spend decode: hash is not the record key's", NULL);
    if (rc == SP_RECORD_KEY_DELETE)
        return rc;
    check(strnlen(k->key_alias, sizeof(k->key_alias)) < sizeof(k->key_alias) &&
              strnlen(k->team_id, sizeof(k->team_id)) < sizeof(k->team_id) &&
              strnlen(k->user_id, sizeof(k->user_id)) < sizeof(k->user_id),
          "spend decode: string over its field", NULL);
    check(k->max_budget_nusd >= -1 && k->budget_period_s >= 0,
          "spend decode: negative budget or period", NULL);
    check(k->metadata_json == *metadata, "spend decode: metadata_json is not *metadata", NULL);
    if (*metadata != NULL) {
        json_t *m = json_loads(*metadata, 0, NULL);

        check(json_is_object(m), "spend decode: metadata is not JSON object text", *metadata);
        json_decref(m);
    }
    /* the mirror: a budget has a period, a positive multiple of a minute */
    if (sp_budgets_key_set(mirror, k) == 0) {
        int64_t p = sp_budgets_period_of(mirror, 0, k->key_hash);

        if (k->max_budget_nusd >= 0)
            check(p > 0 && p % 60 == 0, "spend mirror: budget period not a multiple of 60 s", NULL);
        else
            check(p == 0, "spend mirror: period without a budget", NULL);
        sp_budgets_key_delete(mirror, k->key_hash);
    }
    return rc;
}

/* Bytes after a string's NUL, up to its field's end, zeroed. */
static void zero_tail(char *str, size_t cap)
{
    size_t n = strnlen(str, cap);

    if (n < cap)
        memset(str + n, 0, cap - n);
}

/* A spec in a form where equal specs are equal bytes: model limits in group order (their
 * order follows the input's), slots past each count and bytes past each string zeroed (a
 * list reset by null or compacted keeps its old entries there). */
static void normalise(struct rt_key_spec *s)
{
    for (uint32_t i = 1; i < s->n_model_limits && i < RT_KEY_MODEL_LIMITS_MAX; i++) {
        struct rt_key_model_limit l = s->model_limits[i];
        uint32_t j = i;

        while (j > 0 && strcmp(s->model_limits[j - 1].group, l.group) > 0) {
            s->model_limits[j] = s->model_limits[j - 1];
            j--;
        }
        s->model_limits[j] = l;
    }
    zero_tail(s->key_hash, sizeof(s->key_hash));
    zero_tail(s->key_alias, sizeof(s->key_alias));
    zero_tail(s->team_id, sizeof(s->team_id));
    zero_tail(s->user_id, sizeof(s->user_id));
    zero_tail(s->extra, sizeof(s->extra));
    for (uint32_t i = 0; i < RT_KEY_MODELS_MAX; i++) {
        if (i < s->n_models)
            zero_tail(s->models[i], sizeof(s->models[i]));
        else
            memset(s->models[i], 0, sizeof(s->models[i]));
    }
    for (uint32_t i = 0; i < RT_KEY_MODEL_LIMITS_MAX; i++) {
        if (i < s->n_model_limits)
            zero_tail(s->model_limits[i].group, sizeof(s->model_limits[i].group));
        else
            memset(&s->model_limits[i], 0, sizeof(s->model_limits[i]));
    }
    for (uint32_t i = 0; i < RT_KEY_TAGS_MAX; i++) {
        if (i < s->n_tags)
            zero_tail(s->tags[i], sizeof(s->tags[i]));
        else
            memset(s->tags[i], 0, sizeof(s->tags[i]));
    }
    for (uint32_t i = 0; i < RT_KEY_FALLBACK_RULES_MAX; i++) {
        struct rt_fallback_rule *r = &s->fallbacks[i];

        if (i >= s->n_fallbacks) {
            memset(r, 0, sizeof(*r));
            continue;
        }
        zero_tail(r->group, sizeof(r->group));
        for (uint32_t t = 0; t < RT_FALLBACK_TARGETS_MAX; t++) {
            if (t < r->n_targets)
                zero_tail(r->targets[t], sizeof(r->targets[t]));
            else
                memset(r->targets[t], 0, sizeof(r->targets[t]));
        }
    }
    for (uint32_t i = 0; i < RT_KEY_ALIASES_MAX; i++) {
        if (i < s->n_aliases) {
            zero_tail(s->aliases[i].alias, sizeof(s->aliases[i].alias));
            zero_tail(s->aliases[i].group, sizeof(s->aliases[i].group));
        } else {
            memset(&s->aliases[i], 0, sizeof(s->aliases[i]));
        }
    }
}

/* A PUT's spec: stored form, fixpoint, and spend-svc's reading of it. */
static void round_trip(const struct rt_key_spec *s, const char *hash)
{
    char rkey[RT_CONTROL_RECORD_KEY_MAX];
    char err[256];
    size_t n1 = 0, n2 = 0;
    struct rt_key_change ch;
    struct sp_pg_key k;
    char *metadata = NULL;
    int rc;

    rc = rt_key_spec_to_json(s, enc1, sizeof(enc1), &n1);
    check(rc == 0, "a decoded key spec does not encode within RT_KEY_JSON_MAX", tg_errname(rc));
    snprintf(rkey, sizeof(rkey), "key:%s", hash);
    err[0] = '\0';
    rc = rt_keys_control_decode(rkey, strlen(rkey), enc1, n1, NULL, &ch, &spec2, err, sizeof(err));
    check(rc == 0 && ch.op == RT_KEY_PUT, "the stored form of a decoded spec does not decode", err);
    rc = rt_key_spec_to_json(&spec2, enc2, sizeof(enc2), &n2);
    check(rc == 0 && n1 == n2 && memcmp(enc1, enc2, n1) == 0,
          "encode(decode(encode(spec))) is not encode(spec)", enc1);
    /* and every field came back (both specs start from rt_key_spec_init's zeroes) */
    memcpy(&cmp1, s, sizeof(cmp1));
    memcpy(&cmp2, &spec2, sizeof(cmp2));
    normalise(&cmp1);
    normalise(&cmp2);
    check(memcmp(&cmp1, &cmp2, sizeof(cmp1)) == 0, "decode(encode(spec)) is not spec", enc1);

    rc = spend_decode(rkey, strlen(rkey), enc1, n1, &k, &metadata);
    check(rc == SP_RECORD_KEY_PUT, "spend-svc refuses router-svc's stored form", enc1);
    check(strcmp(k.key_hash, hash) == 0 && strcmp(k.key_alias, s->key_alias) == 0 &&
              strcmp(k.team_id, s->team_id) == 0 && strcmp(k.user_id, s->user_id) == 0,
          "spend-svc reads other names than router-svc stored", enc1);
    check(k.max_budget_nusd == (s->max_budget_nusd < 0 ? -1 : s->max_budget_nusd) &&
              k.budget_period_s == s->budget_duration_s,
          "spend-svc reads another budget than router-svc stored", enc1);
    free(metadata);
}

/* block_value: a value as a block. What proto decodes encodes, and decodes again as the same
 * block with the same bytes (a fixpoint). */
static void block_value(const char *value, size_t len)
{
    struct proto_ctl_block b1, b2;
    char out1[PROTO_CTL_BLOCK_JSON_MAX], out2[PROTO_CTL_BLOCK_JSON_MAX];
    char err[256];
    size_t n1 = 0, n2 = 0;
    int rc;

    err[0] = '\0';
    rc = proto_ctl_block_decode(value, len, &b1, err, sizeof(err));
    check(rc == 0 || (rc == TG_EINVAL && err[0] != '\0'),
          "block decode: refused outside the contract or without a message", NULL);
    if (rc != 0)
        return;
    rc = proto_ctl_block_encode(&b1, out1, sizeof(out1), &n1);
    check(rc == 0, "block: a decoded block does not encode", tg_errname(rc));
    rc = proto_ctl_block_decode(out1, n1, &b2, err, sizeof(err));
    check(rc == 0, "block: an encoded block does not decode", err);
    check(memcmp(&b1, &b2, sizeof(b1)) == 0, "block: decode(encode(block)) is not block", out1);
    rc = proto_ctl_block_encode(&b2, out2, sizeof(out2), &n2);
    check(rc == 0 && n1 == n2 && memcmp(out1, out2, n1) == 0,
          "block: encode(decode(encode(block))) is not encode(block)", out1);
}

/* block: a block built from the input, encoded by proto as router-svc and spend-svc do. */
static void block(const char *value, size_t len, uint64_t h)
{
    struct proto_ctl_block b;
    char out[PROTO_CTL_BLOCK_JSON_MAX];
    char err[256];
    size_t n = 0, rlen;
    int valid, rc;

    block_value(value, len);
    proto_ctl_block_init(&b);
    memcpy(b.reason, value, len < sizeof(b.reason) - 1 ? len : sizeof(b.reason) - 1);
    zero_tail(b.reason, sizeof(b.reason)); /* the reason ends at its first NUL */
    rlen = strlen(b.reason);
    valid = rlen > 0;
    for (size_t i = 0; i < rlen; i++) {
        unsigned char c = (unsigned char)b.reason[i];

        valid &= c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
    }
    b.since_ms = (int64_t)(h >> 1);
    b.until_ms = (h & 1) ? 0 : (int64_t)(h >> 2);
    if (h & 2) { /* spend-svc's form */
        snprintf(b.scope, sizeof(b.scope), "%s", (h & 4) ? "team" : "key");
        b.period_start_ms = (int64_t)(h >> 3);
        b.spend_nusd = (int64_t)(h >> 4);
        b.max_budget_nusd = (h & 8) ? -1 : (int64_t)(h >> 5);
    }
    rc = proto_ctl_block_encode(&b, out, sizeof(out), &n);
    if (!valid) {
        check(rc == TG_EINVAL, "block: a reason the header rules out was not refused", NULL);
        return;
    }
    check(rc == 0, "block: refused a valid block", tg_errname(rc));
    check(n == strlen(out) && n < sizeof(out), "block: length is not the text's", NULL);
    {
        json_t *j = json_loadb(out, n, 0, NULL);
        json_t *r = json_object_get(j, "reason");
        json_t *s = json_object_get(j, "since_ms");
        json_t *u = json_object_get(j, "until_ms");
        struct rt_key_change ch;
        struct proto_ctl_block back;
        char rkey[RT_CONTROL_RECORD_KEY_MAX];

        check(json_is_object(j) && json_object_size(j) == ((h & 2) ? 6u + !(h & 8) : 3u) &&
                  json_is_string(r) && strcmp(json_string_value(r), b.reason) == 0 &&
                  json_is_integer(s) && json_integer_value(s) == b.since_ms &&
                  json_is_integer(u) && json_integer_value(u) == b.until_ms,
              "block: the value is not the block's JSON", out);
        json_decref(j);
        rc = proto_ctl_block_decode(out, n, &back, err, sizeof(err));
        check(rc == 0 && memcmp(&back, &b, sizeof(b)) == 0,
              "block: proto does not read back its block", out);
        snprintf(rkey, sizeof(rkey), "block:%064x", 0);
        rc =
            rt_keys_control_decode(rkey, strlen(rkey), out, n, NULL, &ch, &spec2, err, sizeof(err));
        check(rc == 0 && ch.op == RT_KEY_BLOCK, "block: router-svc does not decode its block", out);
    }
}

/* The team: properties (see the header). */
static void team_record(const char *rkey, size_t rklen, const char *value, size_t len)
{
    char err[512] = "", back[PROTO_CTL_RECORD_KEY_MAX];
    int is_put = -1, is_team = rklen >= 5 && memcmp(rkey, "team:", 5) == 0;
    int rc = rt_teams_control_decode(rkey, rklen, value, len, &team, &is_put, err, sizeof(err));
    int src = sp_budgets_team_record(mirror, rkey, rklen, value, len);
    size_t n1 = 0, n2 = 0;

    check(src == is_team, "spend-svc's team mirror takes a record that is not a team's, or "
                          "the reverse", NULL);
    if (src == 1 && value != NULL)
        sp_budgets_team_record(mirror, rkey, rklen, NULL, 0); /* emptied after every input */
    check(rc == 0 || rc == TG_ENOTFOUND || rc == TG_EINVAL,
          "team decode: return code outside the contract", NULL);
    check((rc == TG_ENOTFOUND) == !is_team, "team decode: whose record it is", NULL);
    check(rc != TG_EINVAL || err[0] != '\0', "team decode: refused without a message", NULL);
    if (rc != 0)
        return;
    check(proto_ctl_team_id_ok(team.team_id), "team decode: invalid id", NULL);
    check(proto_ctl_team_record_key(team.team_id, back, sizeof(back)) == (int)rklen &&
              memcmp(back, rkey, rklen) == 0,
          "proto_ctl_team_record_key does not give back the record key", NULL);
    check(is_put == (value != NULL), "team decode: put/delete does not follow the value", NULL);
    if (!is_put)
        return;
    rc = rt_team_spec_to_json(&team, tenc1, sizeof(tenc1), &n1);
    check(rc == 0, "a decoded team does not encode", tg_errname(rc));
    rc = rt_teams_control_decode(rkey, rklen, tenc1, n1, &team2, &is_put, err, sizeof(err));
    check(rc == 0, "a team's stored form does not decode", err);
    rc = rt_team_spec_to_json(&team2, tenc2, sizeof(tenc2), &n2);
    check(rc == 0 && n1 == n2 && memcmp(tenc1, tenc2, n1) == 0,
          "a team's stored form is not a fixpoint", tenc1);
    {
        struct proto_ctl_team pt;
        struct rt_teams *teams;

        rc = proto_ctl_team_decode(team.team_id, tenc1, n1, &pt, err, sizeof(err));
        check(rc == 0, "proto refuses router-svc's stored team", err);
        check(strcmp(pt.team_alias, team.team_alias) == 0 &&
                  pt.max_budget_nusd == (team.max_budget_nusd < 0 ? -1 : team.max_budget_nusd) &&
                  pt.budget_duration_s == team.budget_duration_s && pt.blocked == team.blocked,
              "proto reads a team otherwise than router-svc", tenc1);
        teams = rt_teams_create(1, err, sizeof(err));
        check(teams != NULL, "rt_teams_create", err);
        check(rt_teams_put(teams, &team) == 0, "the teams table refuses a decoded team", NULL);
        rt_teams_destroy(&teams);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data + 1;
    const char *nl, *rkey, *value;
    size_t rklen, len;
    int tombstone;
    uint64_t h = 0xcbf29ce484222325ull;
    struct rt_key_change ch;
    struct sp_pg_key k;
    char *metadata = NULL;
    char err[256];
    int rc, src;

    if (size < 1)
        return 0;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    tombstone = data[0] & 1;
    nl = memchr(in, '\n', size - 1);
    rkey = in;
    rklen = nl != NULL ? (size_t)(nl - in) : size - 1;
    value = nl != NULL ? nl + 1 : in + size - 1;
    len = (size_t)(in + size - 1 - value);
    if (tombstone)
        value = NULL;

    err[0] = '\0';
    rc = rt_keys_control_decode(rkey, rklen, value, value != NULL ? len : 0, NULL, &ch, &spec, err,
                                sizeof(err));
    check(rc == 0 || rc == TG_ENOTFOUND || rc == TG_EINVAL,
          "router decode: return code outside the contract", NULL);
    check(rc != TG_EINVAL || err[0] != '\0', "router decode: refused without a message", NULL);
    {
        /* proto's reading of the record key, which both services use */
        enum proto_ctl_kind kind;
        char hash[PROTO_CTL_HASH_LEN + 1];
        int prc = proto_ctl_parse_key(rkey, rklen, &kind, hash, err, sizeof(err));
        int ours = (rklen >= 4 && memcmp(rkey, "key:", 4) == 0) ||
                   (rklen >= 6 && memcmp(rkey, "block:", 6) == 0);

        check(ours ? prc != TG_ENOTFOUND : prc == TG_ENOTFOUND,
              "proto: a record key of the schema taken for another, or the reverse", NULL);
        check((prc == TG_ENOTFOUND) == (rc == TG_ENOTFOUND),
              "router decode and proto disagree on whose record it is", NULL);
        check(prc != 0 || is_hash(hash), "proto: hash is not 64 lowercase hex", NULL);
    }
    if (rc == 0) {
        char back[RT_CONTROL_RECORD_KEY_MAX];
        struct rt_control_record rec;
        struct rt_keys *keys;
        int is_block = rklen > 6 && memcmp(rkey, "block:", 6) == 0;

        check(is_hash(ch.hash), "router decode: hash is not 64 lowercase hex", NULL);
        check(ch.op == (is_block ? (value != NULL ? RT_KEY_BLOCK : RT_KEY_UNBLOCK)
                                 : (value != NULL ? RT_KEY_PUT : RT_KEY_DELETE)),
              "router decode: operation does not follow from the record", NULL);
        check(ch.op != RT_KEY_PUT || (ch.spec == &spec && strcmp(spec.key_hash, ch.hash) == 0),
              "router decode: PUT without its spec", NULL);
        memset(&rec, 0, sizeof(rec));
        rec.op = ch.op;
        memcpy(rec.hash, ch.hash, sizeof(rec.hash));
        check(rt_control_record_key(&rec, back, sizeof(back)) == (int)rklen &&
                  memcmp(back, rkey, rklen) == 0,
              "rt_control_record_key does not give back the record key", NULL);
        keys = rt_keys_create(NULL, 0, 4, err, sizeof(err));
        check(keys != NULL, "rt_keys_create", err);
        rc = rt_keys_apply(keys, &ch, 1);
        check(rc == 0, "rt_keys_apply refuses a decoded change", tg_errname(rc));
        rt_keys_destroy(&keys);
        if (ch.op == RT_KEY_PUT)
            round_trip(&spec, ch.hash);
    } else if (rc == TG_ENOTFOUND) {
        check(!(rklen >= 4 && memcmp(rkey, "key:", 4) == 0) &&
                  !(rklen >= 6 && memcmp(rkey, "block:", 6) == 0),
              "router decode: a keys record taken for another", NULL);
    }

    src = spend_decode(rkey, rklen, value, value != NULL ? len : 0, &k, &metadata);
    check(rc != TG_ENOTFOUND || src == SP_RECORD_SKIP,
          "spend-svc mirrors a record router-svc does not take for its own", NULL);
    if (rc == 0 && ch.op == RT_KEY_PUT) {
        check(src == SP_RECORD_KEY_PUT, "spend-svc refuses a key record router-svc takes", NULL);
        check(strcmp(k.key_alias, spec.key_alias) == 0 && strcmp(k.team_id, spec.team_id) == 0 &&
                  strcmp(k.user_id, spec.user_id) == 0 &&
                  k.max_budget_nusd == (spec.max_budget_nusd < 0 ? -1 : spec.max_budget_nusd) &&
                  k.budget_period_s == spec.budget_duration_s,
              "spend-svc reads a key record otherwise than router-svc", NULL);
    }
    if (rc == 0 && ch.op == RT_KEY_DELETE)
        check(src == SP_RECORD_KEY_DELETE, "spend-svc does not delete what router-svc deletes",
              NULL);
    free(metadata);

    team_record(rkey, rklen, value, value != NULL ? len : 0);
    block(value != NULL ? value : "", value != NULL ? len : 0, h);
    return 0;
}
