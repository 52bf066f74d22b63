/* proto_control: control topic record keys, block values, and the shared fields of key records.
 * See proto_control.h. */
#include "proto_control.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tg_err.h"
#include "tg_units.h"

static int hash_ok(const char *h, size_t len)
{
    if (len != PROTO_CTL_HASH_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    return 1;
}

/* fail: "what: problem" into err; TG_EINVAL. */
static int fail(char *err, size_t errlen, const char *what, const char *problem)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", what, problem);
    return TG_EINVAL;
}

int proto_ctl_record_key(enum proto_ctl_kind kind, const char *hash, char *out, size_t cap)
{
    const char *prefix;
    int n;

    if (hash == NULL || !hash_ok(hash, strnlen(hash, PROTO_CTL_HASH_LEN + 1)))
        return TG_EINVAL;
    if (kind == PROTO_CTL_KEY)
        prefix = PROTO_CTL_KEY_PREFIX;
    else if (kind == PROTO_CTL_BLOCK)
        prefix = PROTO_CTL_BLOCK_PREFIX;
    else
        return TG_EINVAL;
    n = snprintf(out, cap, "%s%s", prefix, hash);
    if (n < 0 || (size_t)n >= cap)
        return TG_EINVAL;
    return n;
}

int proto_ctl_parse_key(const char *rkey, size_t len, enum proto_ctl_kind *kind,
                        char hash[PROTO_CTL_HASH_LEN + 1], char *err, size_t errlen)
{
    static const size_t kp = sizeof(PROTO_CTL_KEY_PREFIX) - 1;
    static const size_t bp = sizeof(PROTO_CTL_BLOCK_PREFIX) - 1;
    const char *h;

    if (rkey == NULL)
        return TG_ENOTFOUND;
    if (len >= kp && memcmp(rkey, PROTO_CTL_KEY_PREFIX, kp) == 0) {
        *kind = PROTO_CTL_KEY;
        h = rkey + kp;
        len -= kp;
    } else if (len >= bp && memcmp(rkey, PROTO_CTL_BLOCK_PREFIX, bp) == 0) {
        *kind = PROTO_CTL_BLOCK;
        h = rkey + bp;
        len -= bp;
    } else {
        return TG_ENOTFOUND;
    }
    if (!hash_ok(h, len))
        return fail(err, errlen, "record key", "not a SHA-256 hex hash");
    memcpy(hash, h, PROTO_CTL_HASH_LEN);
    hash[PROTO_CTL_HASH_LEN] = '\0';
    return 0;
}

/* Blocks ------------------------------------------------------------------------------------- */

void proto_ctl_block_init(struct proto_ctl_block *b)
{
    memset(b, 0, sizeof(*b));
    b->period_start_ms = -1;
    b->spend_nusd = -1;
    b->max_budget_nusd = -1;
}

/* reason_ok: non-empty printable ASCII without '"' or '\\' (needs no escaping), within its cap. */
static int reason_ok(const char *r, size_t cap)
{
    size_t n = strnlen(r, cap);

    if (n == 0 || n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)r[i];

        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

static int scope_ok(const char *s, size_t cap)
{
    if (strnlen(s, cap) >= cap)
        return 0;
    return s[0] == '\0' || strcmp(s, "key") == 0 || strcmp(s, "team") == 0;
}

int proto_ctl_block_encode(const struct proto_ctl_block *b, char *out, size_t cap,
                           size_t *outlen)
{
    char scope[32] = "", start[48] = "", spend[48] = "", max[48] = "";
    int n;

    if (!reason_ok(b->reason, sizeof(b->reason)) || b->since_ms < 0 || b->until_ms < 0 ||
        !scope_ok(b->scope, sizeof(b->scope)) || b->period_start_ms < -1 || b->spend_nusd < -1 ||
        b->max_budget_nusd < -1)
        return TG_EINVAL;
    /* the optional members only when given, in the order of the struct */
    if (b->scope[0] != '\0')
        snprintf(scope, sizeof(scope), ",\"scope\":\"%s\"", b->scope);
    if (b->period_start_ms >= 0)
        snprintf(start, sizeof(start), ",\"period_start_ms\":%" PRId64, b->period_start_ms);
    if (b->spend_nusd >= 0)
        snprintf(spend, sizeof(spend), ",\"spend_nusd\":%" PRId64, b->spend_nusd);
    if (b->max_budget_nusd >= 0)
        snprintf(max, sizeof(max), ",\"max_budget_nusd\":%" PRId64, b->max_budget_nusd);
    n = snprintf(out, cap,
                 "{\"reason\":\"%s\",\"since_ms\":%" PRId64 ",\"until_ms\":%" PRId64
                 "%s%s%s%s}",
                 b->reason, b->since_ms, b->until_ms, scope, start, spend, max);
    if (n < 0 || (size_t)n >= cap)
        return TG_ETOOBIG;
    *outlen = (size_t)n;
    return 0;
}

/* whole: member name of o as a whole number >= 0 into *out; absent leaves *out. */
static int whole(json_t *o, const char *name, int required, int64_t *out, char *err,
                 size_t errlen)
{
    json_t *v = json_object_get(o, name);

    if (v == NULL) {
        if (required)
            return fail(err, errlen, name, "missing");
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(err, errlen, name, "expected a whole number >= 0");
    *out = (int64_t)json_integer_value(v);
    return 0;
}

int proto_ctl_block_decode(const char *value, size_t len, struct proto_ctl_block *b, char *err,
                           size_t errlen)
{
    json_error_t jerr;
    json_t *o = NULL, *v;
    int rc = TG_EINVAL;

    proto_ctl_block_init(b);
    if (value == NULL || len > PROTO_CTL_BLOCK_VALUE_MAX)
        return fail(err, errlen, "block value", "missing or over 4096 bytes");
    o = json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL || !json_is_object(o)) {
        fail(err, errlen, "block value",
             o == NULL ? "invalid JSON, or a member given twice" : "not a JSON object");
        goto out;
    }
    v = json_object_get(o, "reason");
    if (v == NULL) {
        fail(err, errlen, "reason", "missing");
        goto out;
    }
    if (!json_is_string(v) || json_string_length(v) >= sizeof(b->reason) ||
        strlen(json_string_value(v)) != json_string_length(v) ||
        !reason_ok(json_string_value(v), sizeof(b->reason))) {
        fail(err, errlen, "reason",
             "expected 1 to 63 printable ASCII characters without quote or backslash");
        goto out;
    }
    memcpy(b->reason, json_string_value(v), json_string_length(v) + 1);
    if (whole(o, "since_ms", 1, &b->since_ms, err, errlen) != 0 ||
        whole(o, "until_ms", 1, &b->until_ms, err, errlen) != 0 ||
        whole(o, "period_start_ms", 0, &b->period_start_ms, err, errlen) != 0 ||
        whole(o, "spend_nusd", 0, &b->spend_nusd, err, errlen) != 0 ||
        whole(o, "max_budget_nusd", 0, &b->max_budget_nusd, err, errlen) != 0)
        goto out;
    v = json_object_get(o, "scope");
    if (v != NULL) {
        if (!json_is_string(v) || json_string_length(v) >= sizeof(b->scope) ||
            strlen(json_string_value(v)) != json_string_length(v) ||
            !scope_ok(json_string_value(v), sizeof(b->scope))) {
            fail(err, errlen, "scope", "expected \"key\" or \"team\"");
            goto out;
        }
        memcpy(b->scope, json_string_value(v), json_string_length(v) + 1);
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* Key records --------------------------------------------------------------------------------- */

/* name: a string member (or null / absent: "") into dst (cap bytes, NUL included). */
static int name(json_t *o, const char *member, char *dst, size_t cap, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, member);

    dst[0] = '\0';
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return fail(err, errlen, member, "expected a string or null");
    if (json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v))
        return fail(err, errlen, member, "longer than 64 bytes or holds a NUL");
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* budget: max_budget_nusd, else LiteLLM's max_budget in USD (capped at INT64_MAX nano-USD). */
static int budget(json_t *o, int64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, "max_budget_nusd");
    char num[64];
    int rc;

    *out = -1;
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_integer(v))
            return fail(err, errlen, "max_budget_nusd", "expected a whole number or null");
        if (json_integer_value(v) >= 0)
            *out = (int64_t)json_integer_value(v);
        return 0;
    }
    v = json_object_get(o, "max_budget");
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return fail(err, errlen, "max_budget", "expected a number (USD) or null");
    if (json_number_value(v) < 0)
        return 0; /* a negative amount is no budget, as null is */
    snprintf(num, sizeof(num), "%.17g", json_number_value(v));
    rc = tg_parse_usd_nusd(num, out);
    if (rc == TG_ERANGE) {
        *out = INT64_MAX; /* beyond what int64 nano-USD holds (9.2e9 USD): capped there */
        return 0;
    }
    if (rc != 0)
        return fail(err, errlen, "max_budget", "expected a number (USD) or null");
    return 0;
}

/* period: budget_duration_s, else LiteLLM's budget_duration ("30d"). */
static int period(json_t *o, int64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, "budget_duration_s");

    *out = 0;
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_integer(v))
            return fail(err, errlen, "budget_duration_s", "expected a whole number or null");
        if (json_integer_value(v) > 0)
            *out = (int64_t)json_integer_value(v);
        return 0;
    }
    v = json_object_get(o, "budget_duration");
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v) || tg_parse_duration_s(json_string_value(v), out) != 0) {
        *out = 0;
        return fail(err, errlen, "budget_duration",
                    "expected a duration like 30s, 10m, 1h, 7d or 1mo");
    }
    return 0;
}

int proto_ctl_key_decode(const char *hash, const char *value, size_t len, struct proto_ctl_key *k,
                         char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *o = NULL, *v;
    int rc = TG_EINVAL;

    memset(k, 0, sizeof(*k));
    k->max_budget_nusd = -1;
    if (hash == NULL || !hash_ok(hash, strnlen(hash, PROTO_CTL_HASH_LEN + 1)))
        return fail(err, errlen, "record key", "not a SHA-256 hex hash");
    memcpy(k->key_hash, hash, PROTO_CTL_HASH_LEN + 1);
    if (value == NULL)
        return fail(err, errlen, "key value", "missing");
    o = json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL || !json_is_object(o)) {
        fail(err, errlen, "key value",
             o == NULL ? "invalid JSON, or a member given twice" : "not a JSON object");
        goto out;
    }
    v = json_object_get(o, "key_hash");
    if (v != NULL && (!json_is_string(v) || strcmp(json_string_value(v), hash) != 0)) {
        fail(err, errlen, "key_hash", "does not match the record key");
        goto out;
    }
    if (name(o, "key_alias", k->key_alias, sizeof(k->key_alias), err, errlen) != 0 ||
        name(o, "team_id", k->team_id, sizeof(k->team_id), err, errlen) != 0 ||
        name(o, "user_id", k->user_id, sizeof(k->user_id), err, errlen) != 0 ||
        budget(o, &k->max_budget_nusd, err, errlen) != 0 ||
        period(o, &k->budget_duration_s, err, errlen) != 0)
        goto out;
    v = json_object_get(o, "metadata");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_object(v)) {
            fail(err, errlen, "metadata", "expected an object or null");
            goto out;
        }
        k->metadata_json = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (k->metadata_json == NULL) {
            rc = TG_ENOMEM;
            fail(err, errlen, "metadata", "out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(o);
    if (rc != 0)
        proto_ctl_key_fini(k);
    return rc;
}

void proto_ctl_key_fini(struct proto_ctl_key *k)
{
    free(k->metadata_json);
    k->metadata_json = NULL;
}

/* Team records ------------------------------------------------------------------------------- */

static int team_id_ok(const char *id, size_t len)
{
    if (len == 0 || len > PROTO_CTL_TEAM_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = id[i];

        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@'))
            return 0;
    }
    return 1;
}

int proto_ctl_team_id_ok(const char *id)
{
    return id != NULL && team_id_ok(id, strnlen(id, PROTO_CTL_TEAM_ID_MAX + 1));
}

int proto_ctl_team_record_key(const char *id, char *out, size_t cap)
{
    int n;

    if (!proto_ctl_team_id_ok(id))
        return TG_EINVAL;
    n = snprintf(out, cap, "%s%s", PROTO_CTL_TEAM_PREFIX, id);
    if (n < 0 || (size_t)n >= cap)
        return TG_EINVAL;
    return n;
}

int proto_ctl_parse_team_key(const char *rkey, size_t len, char id[PROTO_CTL_TEAM_ID_MAX + 1],
                             char *err, size_t errlen)
{
    static const size_t tp = sizeof(PROTO_CTL_TEAM_PREFIX) - 1;

    if (rkey == NULL || len < tp || memcmp(rkey, PROTO_CTL_TEAM_PREFIX, tp) != 0)
        return TG_ENOTFOUND;
    if (!team_id_ok(rkey + tp, len - tp))
        return fail(err, errlen, "record key",
                    "team id not 1 to 64 letters, digits or \"-_.:@\"");
    memcpy(id, rkey + tp, len - tp);
    id[len - tp] = '\0';
    return 0;
}

int proto_ctl_team_decode(const char *id, const char *value, size_t len, struct proto_ctl_team *t,
                          char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *o = NULL, *v;
    int rc = TG_EINVAL;

    memset(t, 0, sizeof(*t));
    t->max_budget_nusd = -1;
    if (!proto_ctl_team_id_ok(id))
        return fail(err, errlen, "record key",
                    "team id not 1 to 64 letters, digits or \"-_.:@\"");
    memcpy(t->team_id, id, strlen(id) + 1);
    if (value == NULL || len > PROTO_CTL_TEAM_VALUE_MAX)
        return fail(err, errlen, "team value", "missing or over 65536 bytes");
    o = json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL || !json_is_object(o)) {
        fail(err, errlen, "team value",
             o == NULL ? "invalid JSON, or a member given twice" : "not a JSON object");
        goto out;
    }
    v = json_object_get(o, "team_id");
    if (v != NULL && (!json_is_string(v) || strcmp(json_string_value(v), id) != 0)) {
        fail(err, errlen, "team_id", "does not match the record key");
        goto out;
    }
    if (name(o, "team_alias", t->team_alias, sizeof(t->team_alias), err, errlen) != 0 ||
        budget(o, &t->max_budget_nusd, err, errlen) != 0 ||
        period(o, &t->budget_duration_s, err, errlen) != 0)
        goto out;
    v = json_object_get(o, "blocked");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            fail(err, errlen, "blocked", "expected true, false or null");
            goto out;
        }
        t->blocked = json_is_true(v);
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}
