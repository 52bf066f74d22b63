#include "key_api.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "team_api.h"
#include "admin_answer.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_period.h"
#include "tg_time.h"
#include "tg_units.h"

#define MSG_UNAVAILABLE                                                                            \
    "key store unavailable: the control topic could not confirm the change; retry later"
#define MSG_BUSY "key store busy: too many key changes waiting for confirmation; retry later"
#define MSG_CAPACITY "key store full: the keys table reached its capacity (limits.max_keys)"
#define RAW_KEY_MIN 20 /* "sk-" + 17 characters */

struct rt_key_api {
    const struct rt_config *cfg;
    struct rt_keys *keys;
    struct rt_control *control;
    struct rt_team_api *team_api; /* NULL without a teams table */
    _Atomic int in_flight;
};

enum kop { OP_GENERATE = 0, OP_UPDATE = 1, OP_DELETE = 2, OP_BLOCK = 3, OP_REGENERATE = 4 };

enum fail_kind { FAIL_NONE = 0, FAIL_UNAVAIL, FAIL_BUSY, FAIL_CAPACITY, FAIL_INTERNAL };

/* One request in progress. Heap, freed by finish(). */
struct kreq {
    struct rt_key_api *api;
    rt_key_api_done_fn done; /* kreq_answer, with the kreq (every path answers once) */
    void *ud;
    rt_key_api_done_fn caller_done;
    void *caller_ud;
    enum kop op;
    char raw[RT_KEY_API_KEY_MAX + 1]; /* generate: the new key, returned once; wiped on free */
    char hash[TG_SHA256_HEX_LEN + 1];
    struct rt_key_spec spec;
    uint32_t n_del;
    char del[RT_KEY_API_DELETE_MAX][TG_SHA256_HEX_LEN + 1];
    pthread_mutex_t mu;
    uint32_t outstanding; /* submissions not answered yet (+1 while submitting) */
    int phase;            /* regenerate: 0 the new key's record, 1 the old one's deletion */
    char old_hash[TG_SHA256_HEX_LEN + 1]; /* regenerate: the key replaced */
    uint32_t n_ok;
    enum fail_kind fail;
};

/* ---- answers ---- */

/* Dump o (taken) and call done (admin_answer.h). */
static void send_json(rt_key_api_done_fn done, void *ud, int status, json_t *o)
{
    rt_answer_json(done, ud, status, o, RT_KEY_API_BODY_MAX);
}

static void send_error(rt_key_api_done_fn done, void *ud, int status, const char *type,
                       const char *code, const char *param, const char *message)
{
    rt_answer_error(done, ud, RT_KEY_API_BODY_MAX, status, type, code, param, message);
}

/* 400 for a field error "field: problem" from keys.c (or our own, same form). */
static void send_field_error(rt_key_api_done_fn done, void *ud, const char *err)
{
    rt_answer_field_error(done, ud, RT_KEY_API_BODY_MAX, err);
}

static int is_static(const struct rt_key_api *api, const char *hash)
{
    if (api->cfg == NULL)
        return 0;
    for (uint32_t i = 0; i < api->cfg->n_keys; i++) {
        if (strcmp(api->cfg->keys[i].key_hash, hash) == 0)
            return 1;
    }
    return 0;
}

/* The key's public view: the stored fields plus readable budget, duration and expiry. New
 * object or NULL. */
static json_t *info_json(const struct rt_key_api *api, const struct rt_key_spec *spec)
{
    char *buf = malloc(RT_KEY_JSON_MAX), text[64];
    size_t n = 0;
    json_t *o = NULL;

    if (buf == NULL || rt_key_spec_to_json(spec, buf, RT_KEY_JSON_MAX, &n) != 0)
        goto out;
    o = json_loadb(buf, n, 0, NULL);
    if (o == NULL)
        goto out;
    /* LiteLLM's shape: the stored-only fields (key_extra.h) where the caller gave them, at the
     * top level, and the key's model aliases under LiteLLM's name as well */
    json_object_update(o, json_object_get(o, "extra"));
    json_object_del(o, "extra");
    json_object_set(o, "aliases",
                    json_object_get(json_object_get(o, "router_settings"), "model_group_alias"));
    json_object_set_new(o, "max_budget",
                        spec->max_budget_nusd < 0 ? json_null()
                                                  : json_real((double)spec->max_budget_nusd / 1e9));
    if (spec->budget_duration_s > 0) {
        int64_t reset_ms;

        rt_answer_duration(spec->budget_duration_s, text, sizeof(text));
        json_object_set_new(o, "budget_duration", json_string(text));
        /* when the current period ends (by the calendar for 1d, 7d and 30d: tg_period.h) */
        tg_period_window(spec->budget_duration_s, (int64_t)tg_now_epoch_ms(), NULL, &reset_ms);
        rt_answer_iso8601(reset_ms, text, sizeof(text));
        json_object_set_new(o, "budget_reset_at", json_string(text));
    } else {
        json_object_set_new(o, "budget_duration", json_null());
        json_object_set_new(o, "budget_reset_at", json_null());
    }
    if (spec->expires_epoch_ms > 0) {
        rt_answer_iso8601(spec->expires_epoch_ms, text, sizeof(text));
        json_object_set_new(o, "expires", json_string(text));
    } else {
        json_object_set_new(o, "expires", json_null());
    }
    json_object_set_new(o, "static", json_boolean(is_static(api, spec->key_hash)));
    /* LiteLLM's "blocked": the key cannot be used, by an admin's block or its budget */
    json_object_set_new(o, "blocked", json_boolean(spec->blocked || spec->admin_blocked));
    json_object_set_new(o, "admin_blocked", json_boolean(spec->admin_blocked));
    json_object_set_new(o, "budget_exceeded", json_boolean(spec->blocked));
out:
    free(buf);
    return o;
}

/* ---- request life cycle ---- */

/* A request's one answer, key or team route: its in-flight slot is given back before the caller
 * hears it, so nothing touches the API once the last answer is out (the owner may then destroy
 * it) and a client that asks again at once finds its slot free. */
static void answer_released(struct rt_key_api *api, rt_key_api_done_fn done, void *ud,
                            int status, const char *body, size_t len)
{
    atomic_fetch_sub(&api->in_flight, 1);
    done(status, body, len, ud);
}

static void kreq_answer(int status, const char *body, size_t len, void *ud)
{
    struct kreq *r = ud;

    answer_released(r->api, r->caller_done, r->caller_ud, status, body, len);
}

/* After the answer (kreq_answer gave the slot back). */
static void req_free(struct kreq *r)
{
    pthread_mutex_destroy(&r->mu);
    memset(r->raw, 0, sizeof(r->raw));
    free(r);
}

static void send_fail(struct kreq *r, enum fail_kind fail, uint32_t total)
{
    char msg[256];

    switch (fail) {
    case FAIL_BUSY:
        send_error(r->done, r->ud, 503, "server_error", "key_store_busy", NULL, MSG_BUSY);
        return;
    case FAIL_CAPACITY:
        send_error(r->done, r->ud, 503, "server_error", "keys_capacity", NULL, MSG_CAPACITY);
        return;
    case FAIL_INTERNAL:
        send_error(r->done, r->ud, 500, "server_error", "internal_error", NULL,
                   "internal error while storing the key change");
        return;
    default:
        if (total > 1)
            snprintf(msg, sizeof(msg), "%s (%u of %u deletions confirmed)", MSG_UNAVAILABLE,
                     r->n_ok, total);
        else
            snprintf(msg, sizeof(msg), "%s", MSG_UNAVAILABLE);
        send_error(r->done, r->ud, 503, "server_error", "key_store_unavailable", NULL, msg);
        return;
    }
}

/* Every submission answered: build the answer, call done, free. */
/* finish and submit call each other: regenerate's second record is submitted when the first
 * is confirmed. */
static void submit(struct kreq *r, enum rt_key_op op, const char *hash,
                   const struct rt_key_spec *spec);

static void finish(struct kreq *r)
{
    struct rt_key_api *api = r->api;
    json_t *o = NULL;

    if (r->fail != FAIL_NONE) {
        send_fail(r, r->fail, r->op == OP_DELETE ? r->n_del : 1);
        req_free(r);
        return;
    }
    if (r->op == OP_REGENERATE && r->phase == 0) {
        /* the new key is stored: only now is the old one deleted, so a failure never leaves
         * the caller without a working key */
        r->phase = 1;
        r->outstanding = 1;
        submit(r, RT_KEY_DELETE, r->old_hash, NULL);
        return;
    }
    if (r->op == OP_DELETE) {
        json_t *arr = json_array();

        o = json_object();
        for (uint32_t i = 0; arr != NULL && i < r->n_del; i++)
            json_array_append_new(arr, json_string(r->del[i]));
        if (o != NULL && arr != NULL)
            json_object_set_new(o, "deleted_keys", arr);
        else
            json_decref(arr);
        send_json(r->done, r->ud, 200, o);
        req_free(r);
        return;
    }
    /* Generate / update: answer with the record as this replica now holds it (it was applied
     * before the confirmation reached us), which also shows a budget block. */
    {
        struct rt_keys_table *t = rt_keys_acquire(api->keys);
        const struct rt_key *k = rt_keys_lookup_hash(t, r->hash);

        if (k != NULL)
            rt_key_get_spec(k, &r->spec);
        rt_keys_release(&t);
    }
    o = info_json(api, &r->spec);
    if (o != NULL && (r->op == OP_GENERATE || r->op == OP_REGENERATE)) {
        json_t *g = json_object();

        if (g != NULL) {
            json_object_set_new(g, "key", r->raw[0] != '\0' ? json_string(r->raw) : json_null());
            json_object_set_new(g, "key_hash", json_string(r->hash));
            json_object_set(g, "key_alias", json_object_get(o, "key_alias"));
            json_object_set(g, "expires", json_object_get(o, "expires"));
            json_object_update_missing(g, o);
        }
        json_decref(o);
        o = g;
    }
    send_json(r->done, r->ud, 200, o);
    req_free(r);
}

/* One submission answered (0 or a failure kind). Any thread. */
static void one_done(struct kreq *r, enum fail_kind fail)
{
    int last;

    pthread_mutex_lock(&r->mu);
    if (fail == FAIL_NONE)
        r->n_ok++;
    else if (r->fail == FAIL_NONE || fail == FAIL_UNAVAIL)
        r->fail = fail;
    last = --r->outstanding == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        finish(r);
}

static void on_published(int status, void *ud)
{
    one_done(ud, status == 0 ? FAIL_NONE : FAIL_UNAVAIL);
}

/* Submit one change; exactly one one_done() follows (maybe before this returns). */
static void submit(struct kreq *r, enum rt_key_op op, const char *hash,
                   const struct rt_key_spec *spec)
{
    struct rt_key_api *api = r->api;
    int rc;

    if (api->control == NULL) {
        struct rt_key_change ch;

        memset(&ch, 0, sizeof(ch));
        ch.op = op;
        memcpy(ch.hash, hash, sizeof(ch.hash));
        ch.spec = spec;
        rc = rt_keys_apply(api->keys, &ch, 1);
        one_done(r, rc == 0 ? FAIL_NONE : rc == TG_EFULL ? FAIL_CAPACITY : FAIL_INTERNAL);
        return;
    }
    {
        struct rt_control_record rec;

        memset(&rec, 0, sizeof(rec));
        rec.op = op;
        memcpy(rec.hash, hash, sizeof(rec.hash));
        rec.spec = spec;
        rc = rt_control_publish(api->control, &rec, on_published, r);
    }
    if (rc != 0)
        one_done(r, rc == TG_EFULL ? FAIL_BUSY : rc == TG_EUNAVAIL ? FAIL_UNAVAIL : FAIL_INTERNAL);
}

/* ---- body helpers ---- */

/* Parse body as a JSON object (empty body = {} when allow_empty). NULL with err set. */
static json_t *parse_body(const char *body, size_t len, int allow_empty, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *o;

    if (body == NULL || len == 0) {
        if (allow_empty)
            return json_object();
        snprintf(err, errlen, "body: expected a JSON object");
        return NULL;
    }
    o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL) {
        snprintf(err, errlen, "body: invalid JSON at line %d column %d", jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        snprintf(err, errlen, "body: expected a JSON object");
        return NULL;
    }
    return o;
}

static int valid_hash(const char *h, size_t n)
{
    if (n != TG_SHA256_HEX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    }
    return 1;
}

static int valid_custom_key(const char *k, size_t n)
{
    if (n < RAW_KEY_MIN || n > RT_KEY_API_KEY_MAX || strncmp(k, "sk-", 3) != 0)
        return 0;
    for (size_t i = 3; i < n; i++) {
        char c = k[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

/* "duration" of a body: absent (1, nothing to do), null (expires 0), or a duration from now. */
static int parse_duration(json_t *o, int64_t *expires_ms, int *present, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, "duration");
    int64_t s = 0;

    *present = v != NULL;
    if (v == NULL)
        return 0;
    if (json_is_null(v)) {
        *expires_ms = 0;
        return 0;
    }
    if (!json_is_string(v) || tg_parse_duration_s(json_string_value(v), &s) != 0 || s <= 0 ||
        s > 100LL * 365 * 86400) {
        snprintf(err, errlen,
                 "duration: expected a duration like 30s, 10m, 1h, 7d or 1mo, or null");
        return TG_EINVAL;
    }
    *expires_ms = (int64_t)tg_now_epoch_ms() + s * 1000;
    return 0;
}

static void base64url(const unsigned char *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;

    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];

        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;

        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;

        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
    }
    out[o] = '\0';
}

/* Look a key up by raw value or hash: returns 1 found (hash and, when spec, the spec filled),
 * 0 not found. */
/* A new random key into r->raw ("sk-" + base64url). 0, or -1 with the 500 answered. */
static int new_secret(struct kreq *r)
{
    unsigned char rnd[RT_KEY_API_RANDOM_BYTES];

    if (tg_random_bytes(rnd, sizeof(rnd)) != 0) {
        send_error(r->done, r->ud, 500, "server_error", "internal_error", NULL,
                   "no random bytes available to generate a key");
        return -1;
    }
    memcpy(r->raw, "sk-", 3);
    base64url(rnd, sizeof(rnd), r->raw + 3);
    memset(rnd, 0, sizeof(rnd));
    return 0;
}

static int find_key(struct rt_key_api *api, const char *raw, size_t rawlen, const char *hash_in,
                    char *hash_out, struct rt_key_spec *spec)
{
    struct rt_keys_table *t = rt_keys_acquire(api->keys);
    const struct rt_key *k = NULL;

    if (raw != NULL)
        k = rt_keys_lookup(t, raw, rawlen);
    if (k == NULL && hash_in != NULL)
        k = rt_keys_lookup_hash(t, hash_in);
    if (k != NULL) {
        memcpy(hash_out, k->hash, TG_SHA256_HEX_LEN + 1);
        if (spec != NULL)
            rt_key_get_spec(k, spec);
    }
    rt_keys_release(&t);
    return k != NULL;
}

/* ---- endpoints ---- */

/* Store r->spec under the key r->raw (a new one; or, when r->raw is empty, under the hash already
 * in r->hash: an import by key_hash): refused with 409 naming field when the key exists, 503 when
 * the table is full, else submitted; the answer follows from finish(). */
static void put_new_key(struct kreq *r, const char *field)
{
    struct rt_key_api *api = r->api;
    char found[TG_SHA256_HEX_LEN + 1], msg[96];
    struct rt_keys_stats st;

    if (r->raw[0] != '\0')
        tg_sha256_hex(r->raw, strlen(r->raw), r->hash);
    if (find_key(api, NULL, 0, r->hash, found, NULL)) {
        snprintf(msg, sizeof(msg), "%s: a key with this value already exists", field);
        send_error(r->done, r->ud, 409, "invalid_request_error", "key_exists", field, msg);
        req_free(r);
        return;
    }
    rt_keys_get_stats(api->keys, &st);
    if (st.count + st.blocked >= st.capacity) {
        send_fail(r, FAIL_CAPACITY, 1);
        req_free(r);
        return;
    }
    memcpy(r->spec.key_hash, r->hash, sizeof(r->hash));
    r->spec.blocked = 0; /* budget blocks travel as block: records, never inside a key record */
    r->outstanding = 1;
    submit(r, RT_KEY_PUT, r->hash, &r->spec);
}

/* The existing, non-static key named by the "key" member of req (the key or its SHA-256 hash):
 * its hash into hash, its spec into r->spec. Returns 0, or -1 after answering 400 (not a key
 * string, a static key) or 404 (unknown). */
static int named_key(struct kreq *r, const json_t *req, char *hash)
{
    const json_t *k = json_object_get(req, "key");
    const char *key = json_string_value(k);
    size_t n = json_string_length(k);

    if (!json_is_string(k) || n == 0 || n > RT_KEY_API_KEY_MAX || strlen(key) != n) {
        send_error(r->done, r->ud, 400, "invalid_request_error", "invalid_field", "key",
                   "key: expected the key or its SHA-256 hash");
        return -1;
    }
    if (!find_key(r->api, key, n, valid_hash(key, n) ? key : NULL, hash, &r->spec)) {
        send_error(r->done, r->ud, 404, "invalid_request_error", "key_not_found", "key",
                   "key not found");
        return -1;
    }
    if (is_static(r->api, hash)) {
        send_error(r->done, r->ud, 400, "invalid_request_error", "static_key", "key",
                   "key: defined in the config file (tollgate.keys); change it there");
        return -1;
    }
    return 0;
}

static void do_generate(struct kreq *r, const char *body, size_t len)
{
    struct rt_key_api *api = r->api;
    char err[512];
    json_t *o = parse_body(body, len, 1, err, sizeof(err)), *v;
    int64_t expires = 0;
    int has_duration = 0;

    if (o == NULL)
        goto bad;
    v = json_object_get(o, "key_hash");
    if (v != NULL && !json_is_null(v)) {
        /* Import of an existing key by its SHA-256 (LiteLLM stores only that): the raw key is
         * never seen, and the answer's "key" is null. */
        if (!json_is_string(v) || !valid_hash(json_string_value(v), json_string_length(v))) {
            snprintf(err, sizeof(err),
                     "key_hash: expected the key's SHA-256 as 64 lowercase hex characters");
            goto bad;
        }
        if (json_object_get(o, "key") != NULL && !json_is_null(json_object_get(o, "key"))) {
            snprintf(err, sizeof(err), "key_hash: give key or key_hash, not both");
            goto bad;
        }
        memcpy(r->hash, json_string_value(v), TG_SHA256_HEX_LEN + 1);
        r->raw[0] = '\0';
    } else if ((v = json_object_get(o, "key")) != NULL && !json_is_null(v)) {
        if (!json_is_string(v) || !valid_custom_key(json_string_value(v), json_string_length(v))) {
            snprintf(err, sizeof(err),
                     "key: expected \"sk-\" followed by %d to %d letters, digits, '-', '_' or '.'",
                     RAW_KEY_MIN - 3, RT_KEY_API_KEY_MAX - 3);
            goto bad;
        }
        snprintf(r->raw, sizeof(r->raw), "%s", json_string_value(v));
    } else if (new_secret(r) != 0) {
        json_decref(o);
        req_free(r);
        return;
    }
    if (parse_duration(o, &expires, &has_duration, err, sizeof(err)) != 0)
        goto bad;
    json_decref(o);
    o = NULL;
    rt_key_spec_init(&r->spec);
    if (rt_key_spec_from_json(&r->spec, RT_KEY_JSON_API, body != NULL && len > 0 ? body : "{}",
                              body != NULL && len > 0 ? len : 2, api->cfg, err, sizeof(err)) != 0)
        goto bad;
    r->spec.expires_epoch_ms = expires;
    put_new_key(r, r->raw[0] != '\0' ? "key" : "key_hash");
    return;
bad:
    json_decref(o);
    send_field_error(r->done, r->ud, err);
    req_free(r);
}

static void do_update(struct kreq *r, const char *body, size_t len)
{
    struct rt_key_api *api = r->api;
    char err[512], raw_hash[TG_SHA256_HEX_LEN + 1];
    json_t *o = parse_body(body, len, 0, err, sizeof(err));
    json_t *key, *kh;
    const char *raw = NULL, *hash = NULL;
    size_t rawlen = 0;
    int64_t expires = 0;
    int has_duration = 0;

    if (o == NULL)
        goto bad;
    key = json_object_get(o, "key");
    kh = json_object_get(o, "key_hash");
    if (key != NULL && !json_is_null(key)) {
        if (!json_is_string(key) || json_string_length(key) == 0 ||
            json_string_length(key) > RT_KEY_API_KEY_MAX) {
            snprintf(err, sizeof(err), "key: expected the key as a string");
            goto bad;
        }
        raw = json_string_value(key);
        rawlen = json_string_length(key);
        tg_sha256_hex(raw, rawlen, raw_hash);
    }
    if (kh != NULL && !json_is_null(kh)) {
        if (!json_is_string(kh) || !valid_hash(json_string_value(kh), json_string_length(kh))) {
            snprintf(err, sizeof(err), "key_hash: expected 64 lowercase hex characters");
            goto bad;
        }
        hash = json_string_value(kh);
        if (raw != NULL && strcmp(raw_hash, hash) != 0) {
            snprintf(err, sizeof(err), "key_hash: does not match key");
            goto bad;
        }
    }
    if (raw == NULL && hash == NULL) {
        snprintf(err, sizeof(err),
                 "key: expected \"key\" or \"key_hash\" naming the key to update");
        goto bad;
    }
    if (parse_duration(o, &expires, &has_duration, err, sizeof(err)) != 0)
        goto bad;
    if (!find_key(api, NULL, 0, raw != NULL ? raw_hash : hash, r->hash, &r->spec)) {
        json_decref(o);
        send_error(r->done, r->ud, 404, "invalid_request_error", "key_not_found",
                   raw != NULL ? "key" : "key_hash", "key not found");
        req_free(r);
        return;
    }
    json_decref(o);
    o = NULL;
    if (is_static(api, r->hash)) {
        send_error(r->done, r->ud, 400, "invalid_request_error", "static_key", "key",
                   "key: defined in the config file (tollgate.keys); change it there");
        req_free(r);
        return;
    }
    if (rt_key_spec_from_json(&r->spec, RT_KEY_JSON_API, body, len, api->cfg, err, sizeof(err)) !=
        0)
        goto bad;
    if (has_duration)
        r->spec.expires_epoch_ms = expires;
    r->spec.blocked = 0; /* blocks travel as block: records, never inside a key record */
    r->outstanding = 1;
    submit(r, RT_KEY_PUT, r->hash, &r->spec);
    return;
bad:
    json_decref(o);
    send_field_error(r->done, r->ud, err);
    req_free(r);
}

/* Add hash to the delete list (deduplicated). */
static void del_add(struct kreq *r, const char *hash)
{
    for (uint32_t i = 0; i < r->n_del; i++) {
        if (strcmp(r->del[i], hash) == 0)
            return;
    }
    memcpy(r->del[r->n_del++], hash, TG_SHA256_HEX_LEN + 1);
}

static void do_delete(struct kreq *r, const char *body, size_t len)
{
    struct rt_key_api *api = r->api;
    char err[512], field[64], hash[TG_SHA256_HEX_LEN + 1];
    json_t *o = parse_body(body, len, 0, err, sizeof(err));
    json_t *keys, *hashes, *v;
    const char *name;
    size_t i, total;

    if (o == NULL)
        goto bad;
    json_object_foreach(o, name, v)
    {
        if (strcmp(name, "keys") != 0 && strcmp(name, "key_hashes") != 0) {
            snprintf(err, sizeof(err), "%.100s: unknown field (expected keys or key_hashes)", name);
            goto bad;
        }
    }
    keys = json_object_get(o, "keys");
    hashes = json_object_get(o, "key_hashes");
    if ((keys != NULL && !json_is_array(keys) && !json_is_null(keys)) ||
        (hashes != NULL && !json_is_array(hashes) && !json_is_null(hashes))) {
        snprintf(err, sizeof(err), "%s: expected a list of strings",
                 keys != NULL && !json_is_array(keys) && !json_is_null(keys) ? "keys"
                                                                             : "key_hashes");
        goto bad;
    }
    total = (json_is_array(keys) ? json_array_size(keys) : 0) +
            (json_is_array(hashes) ? json_array_size(hashes) : 0);
    if (total == 0 || total > RT_KEY_API_DELETE_MAX) {
        snprintf(err, sizeof(err), "keys: expected 1 to %d keys in keys and key_hashes",
                 RT_KEY_API_DELETE_MAX);
        goto bad;
    }
    for (int pass = 0; pass < 2; pass++) {
        json_t *arr = pass == 0 ? keys : hashes;

        if (!json_is_array(arr))
            continue;
        json_array_foreach(arr, i, v)
        {
            const char *s = json_string_value(v);
            size_t n = json_string_length(v);
            int found;

            snprintf(field, sizeof(field), "%s[%zu]", pass == 0 ? "keys" : "key_hashes", i);
            if (!json_is_string(v) || n == 0 || n > RT_KEY_API_KEY_MAX ||
                (pass == 1 && !valid_hash(s, n))) {
                snprintf(err, sizeof(err), "%s: expected %s", field,
                         pass == 0 ? "a key string" : "64 lowercase hex characters");
                goto bad;
            }
            found = pass == 0 ? find_key(api, s, n, NULL, hash, NULL)
                              : find_key(api, NULL, 0, s, hash, NULL);
            if (!found) {
                char msg[128];

                snprintf(msg, sizeof(msg), "%s: key not found", field);
                json_decref(o);
                send_error(r->done, r->ud, 404, "invalid_request_error", "key_not_found", field,
                           msg);
                req_free(r);
                return;
            }
            if (is_static(api, hash)) {
                char msg[160];

                snprintf(msg, sizeof(msg),
                         "%s: defined in the config file (tollgate.keys); remove it there", field);
                json_decref(o);
                send_error(r->done, r->ud, 400, "invalid_request_error", "static_key", field, msg);
                req_free(r);
                return;
            }
            del_add(r, hash);
        }
    }
    json_decref(o);
    /* +1 guards against finishing while still submitting. */
    r->outstanding = r->n_del + 1;
    for (uint32_t k = 0; k < r->n_del; k++)
        submit(r, RT_KEY_DELETE, r->del[k], NULL);
    one_done(r, FAIL_NONE);
    return;
bad:
    json_decref(o);
    send_field_error(r->done, r->ud, err);
    req_free(r);
}

/* /key/regenerate: POST {"key": raw key or its hash, "new_key": optional "sk-..."} (LiteLLM's
 * route): a new secret for the same key settings. The new key's record is stored first, then
 * the old one deleted (every replica then answers it 401); the new key is returned once. */
static void do_regenerate(struct kreq *r, const char *body, size_t len)
{
    char err[256];
    json_t *o = parse_body(body, len, 0, err, sizeof(err)), *nk, *v;
    const char *name;

    if (o == NULL)
        goto bad;
    json_object_foreach(o, name, v)
    {
        if (strcmp(name, "key") != 0 && strcmp(name, "new_key") != 0) {
            snprintf(err, sizeof(err), "%.100s: unknown field (expected key and new_key)", name);
            goto bad;
        }
    }
    if (named_key(r, o, r->old_hash) != 0) {
        json_decref(o);
        req_free(r);
        return;
    }
    nk = json_object_get(o, "new_key");
    if (nk != NULL && !json_is_null(nk)) {
        if (!json_is_string(nk) ||
            !valid_custom_key(json_string_value(nk), json_string_length(nk))) {
            snprintf(err, sizeof(err),
                     "new_key: expected \"sk-\" followed by %d to %d letters, digits, '-', '_' "
                     "or '.'",
                     RAW_KEY_MIN - 3, RT_KEY_API_KEY_MAX - 3);
            goto bad;
        }
        snprintf(r->raw, sizeof(r->raw), "%s", json_string_value(nk));
    } else if (new_secret(r) != 0) {
        json_decref(o);
        req_free(r);
        return;
    }
    json_decref(o);
    put_new_key(r, "new_key");
    return;
bad:
    json_decref(o);
    send_field_error(r->done, r->ud, err);
    req_free(r);
}

/* /key/block and /key/unblock: POST {"key": raw key or its hash} (LiteLLM's). The key's record
 * carries the admin's block (admin_blocked), so every replica refuses the key (401) once the
 * record reaches it, and a budget period rolling over does not lift it. Static keys are the
 * config file's. Answers the key's info. */
static void do_block(struct kreq *r, int block, const char *body, size_t len)
{
    char err[160];
    json_t *req = parse_body(body, len, 0, err, sizeof(err));

    if (req == NULL) {
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    if (named_key(r, req, r->hash) != 0) {
        json_decref(req);
        req_free(r);
        return;
    }
    json_decref(req);
    r->spec.admin_blocked = block;
    r->spec.blocked = 0; /* budget blocks travel as block: records, never inside a key record */
    r->outstanding = 1;
    submit(r, RT_KEY_PUT, r->hash, &r->spec);
}

/* /key/list: GET (the front passes the query as a JSON object) or POST {page, size, team_id,
 * key_alias, return_full_object} (LiteLLM's names): the keys' hashes (never a raw key), or with
 * return_full_object their info, in hash order, size per page (1..100, default 10). */
struct list_ctx {
    const char *team_id, *key_alias;
    char (*hashes)[TG_SHA256_HEX_LEN + 1];
    size_t n, cap;
};

static int list_one(const struct rt_key *key, int present, void *arg)
{
    struct list_ctx *l = arg;

    if (!present)
        return 0; /* a block mark without a record is no key */
    if (l->team_id != NULL && strcmp(key->team_id != NULL ? key->team_id : "", l->team_id) != 0)
        return 0;
    if (l->key_alias != NULL &&
        strcmp(key->key_alias != NULL ? key->key_alias : "", l->key_alias) != 0)
        return 0;
    if (l->n == l->cap)
        return 1; /* cap is the table's size: cannot happen */
    memcpy(l->hashes[l->n++], key->hash, TG_SHA256_HEX_LEN + 1);
    return 0;
}

static int hash_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* A positive integer member (a number, or a string of digits from a query), else def; -1 when
 * present but not one. */
static int64_t list_int(const json_t *o, const char *name, int64_t def)
{
    const json_t *v = json_object_get(o, name);
    uint64_t x = 0;

    if (v == NULL || json_is_null(v))
        return def;
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? json_integer_value(v) : -1;
    if (!json_is_string(v) || tg_parse_u64(json_string_value(v), &x) != 0 || x == 0 ||
        x > INT32_MAX)
        return -1;
    return (int64_t)x;
}

static void do_list(struct kreq *r, const char *body, size_t len)
{
    struct rt_key_api *api = r->api;
    char err[160];
    json_t *q = parse_body(body, len, 1, err, sizeof(err));
    json_t *out = NULL, *arr = NULL, *full;
    struct rt_keys_table *t = NULL;
    struct list_ctx l;
    int64_t page, size, pages;
    size_t bytes = 256; /* the answer's own members */
    int cut = 0;

    memset(&l, 0, sizeof(l));
    if (q == NULL) {
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    page = list_int(q, "page", 1);
    size = list_int(q, "size", 10);
    if (page < 1 || size < 1 || size > 100) {
        json_decref(q);
        send_error(r->done, r->ud, 400, "invalid_request_error", "invalid_field",
                   page < 1 ? "page" : "size",
                   page < 1 ? "page: expected a whole number from 1"
                            : "size: expected a whole number from 1 to 100");
        req_free(r);
        return;
    }
    l.team_id = json_string_value(json_object_get(q, "team_id"));
    l.key_alias = json_string_value(json_object_get(q, "key_alias"));
    full = json_object_get(q, "return_full_object");
    t = rt_keys_acquire(api->keys);
    l.cap = rt_keys_count(t);
    l.hashes = calloc(l.cap > 0 ? l.cap : 1, sizeof(*l.hashes));
    out = json_object();
    arr = json_array();
    if (l.hashes == NULL || out == NULL || arr == NULL) {
        rt_keys_release(&t);
        json_decref(q);
        json_decref(out);
        json_decref(arr);
        free(l.hashes);
        send_fail(r, FAIL_INTERNAL, 1);
        req_free(r);
        return;
    }
    rt_keys_foreach(t, list_one, &l);
    qsort(l.hashes, l.n, sizeof(*l.hashes), hash_cmp);
    for (size_t i = (size_t)((page - 1) * size); i < l.n && i < (size_t)(page * size); i++) {
        if (json_is_true(full) || (json_is_string(full) && strcmp(json_string_value(full),
                                                                 "true") == 0)) {
            const struct rt_key *k = rt_keys_lookup_hash(t, l.hashes[i]);
            json_t *info;
            size_t need;

            if (k == NULL)
                continue;
            rt_key_get_spec(k, &r->spec);
            info = info_json(api, &r->spec);
            need = info != NULL ? json_dumpb(info, NULL, 0, JSON_COMPACT) + 1 : 0;
            if (bytes + need >= RT_KEY_API_BODY_MAX) {
                json_decref(info); /* the answer's cap: the page ends here, said in the answer */
                cut = 1;
                break;
            }
            bytes += need;
            json_array_append_new(arr, info);
        } else {
            json_array_append_new(arr, json_string(l.hashes[i]));
        }
    }
    rt_keys_release(&t);
    pages = ((int64_t)l.n + size - 1) / size;
    json_object_set_new(out, "keys", arr);
    json_object_set_new(out, "total_count", json_integer((json_int_t)l.n));
    json_object_set_new(out, "current_page", json_integer((json_int_t)page));
    json_object_set_new(out, "total_pages", json_integer((json_int_t)pages));
    if (cut)
        json_object_set_new(out, "page_truncated", json_true()); /* ask for a smaller size */
    free(l.hashes);
    json_decref(q);
    send_json(r->done, r->ud, 200, out);
    req_free(r);
}

/* /key/info: GET ?key=<64-hex hash> or POST {"key": raw key or hash}. A raw key is never taken
 * from the URL: URLs are written to access logs (ingress, proxies) where a key must not be. */
static void do_info(struct kreq *r, int is_get, const char *key_param, const char *body, size_t len)
{
    struct rt_key_api *api = r->api;
    size_t n = 0;
    json_t *o, *info;
    json_t *req = NULL;
    char err[160];

    if (is_get) {
        n = key_param != NULL ? strlen(key_param) : 0;
        if (n == 0) {
            send_error(r->done, r->ud, 400, "invalid_request_error", "invalid_field", "key",
                       "key: expected ?key=<the key's SHA-256 hash>, or POST /key/info with "
                       "{\"key\": \"sk-...\"}");
            req_free(r);
            return;
        }
        if (!valid_hash(key_param, n)) {
            send_error(r->done, r->ud, 400, "invalid_request_error", "raw_key_in_url", "key",
                       "key: a raw key in a URL ends up in access logs; pass its SHA-256 hash "
                       "as ?key=, or POST /key/info with {\"key\": \"sk-...\"}");
            req_free(r);
            return;
        }
    } else {
        json_t *k;

        req = parse_body(body, len, 0, err, sizeof(err));
        if (req == NULL) {
            send_field_error(r->done, r->ud, err);
            req_free(r);
            return;
        }
        k = json_object_get(req, "key");
        if (!json_is_string(k)) {
            json_decref(req);
            send_error(r->done, r->ud, 400, "invalid_request_error", "invalid_field", "key",
                       "key: expected a string (the key or its SHA-256 hash)");
            req_free(r);
            return;
        }
        key_param = json_string_value(k);
        n = json_string_length(k);
    }
    if (n == 0 || n > RT_KEY_API_KEY_MAX || strlen(key_param) != n) {
        json_decref(req);
        send_error(r->done, r->ud, 400, "invalid_request_error", "invalid_field", "key",
                   "key: expected the key or its SHA-256 hash");
        req_free(r);
        return;
    }
    if (!find_key(api, key_param, n, valid_hash(key_param, n) ? key_param : NULL, r->hash,
                  &r->spec)) {
        json_decref(req);
        send_error(r->done, r->ud, 404, "invalid_request_error", "key_not_found", "key",
                   "key not found");
        req_free(r);
        return;
    }
    json_decref(req);
    info = info_json(api, &r->spec);
    o = json_object();
    if (o != NULL && info != NULL) {
        json_object_set_new(o, "key", json_string(r->hash));
        json_object_set_new(o, "key_hash", json_string(r->hash));
        json_object_set_new(o, "info", info);
    } else {
        json_decref(info);
        json_decref(o);
        o = NULL;
    }
    send_json(r->done, r->ud, 200, o);
    req_free(r);
}

/* ---- public ---- */

struct rt_key_api *rt_key_api_create(const struct rt_key_api_config *c, char *err, size_t errlen)
{
    struct rt_key_api *api;

    if (c == NULL || c->keys == NULL) {
        snprintf(err, errlen, "key api: a keys table is required");
        return NULL;
    }
    api = calloc(1, sizeof(*api));
    if (api == NULL) {
        snprintf(err, errlen, "key api: out of memory");
        return NULL;
    }
    api->cfg = c->cfg;
    api->keys = c->keys;
    api->control = c->control;
    if (c->teams != NULL) {
        api->team_api = rt_team_api_create(c->cfg, c->teams, c->keys, c->control, err, errlen);
        if (api->team_api == NULL) {
            free(api);
            return NULL;
        }
    }
    return api;
}

void rt_key_api_destroy(struct rt_key_api **api)
{
    if (api == NULL || *api == NULL)
        return;
    rt_team_api_destroy(&(*api)->team_api);
    free(*api);
    *api = NULL;
}

int rt_key_api_is_admin_path(const char *path)
{
    return path != NULL &&
           (strcmp(path, "/key/generate") == 0 || strcmp(path, "/key/update") == 0 ||
            strcmp(path, "/key/delete") == 0 || strcmp(path, "/key/info") == 0 ||
            strcmp(path, "/key/block") == 0 || strcmp(path, "/key/unblock") == 0 ||
            strcmp(path, "/key/list") == 0 || strcmp(path, "/key/regenerate") == 0 ||
            rt_team_api_is_path(path));
}

/* A team route's answer: the request leaves the in-flight count, then the caller's done. */
struct team_call {
    struct rt_key_api *api;
    rt_key_api_done_fn done;
    void *ud;
};

static void team_done(int status, const char *body, size_t len, void *ud)
{
    struct team_call tc = *(struct team_call *)ud;

    free(ud);
    answer_released(tc.api, tc.done, tc.ud, status, body, len);
}

int rt_key_api_in_flight(const struct rt_key_api *api)
{
    return atomic_load(&api->in_flight);
}

void rt_key_api_handle(struct rt_key_api *api, const char *method, const char *path,
                       const char *key_param, const char *body, size_t len, rt_key_api_done_fn done,
                       void *ud)
{
    struct kreq *r;
    int is_get = method != NULL && strcmp(method, "GET") == 0;
    int is_post = method != NULL && strcmp(method, "POST") == 0;

    if (!rt_key_api_is_admin_path(path) || (rt_team_api_is_path(path) && api->team_api == NULL)) {
        send_error(done, ud, 404, "invalid_request_error", "not_found", NULL,
                   "unknown key API path");
        return;
    }
    if (rt_team_api_is_path(path)) {
        struct team_call *tc;

        if (atomic_fetch_add(&api->in_flight, 1) >= RT_KEY_API_IN_FLIGHT_MAX) {
            atomic_fetch_sub(&api->in_flight, 1);
            send_error(done, ud, 503, "server_error", "key_store_busy", NULL, MSG_BUSY);
            return;
        }
        tc = malloc(sizeof(*tc));
        if (tc == NULL) {
            atomic_fetch_sub(&api->in_flight, 1);
            rt_answer_500(done, ud);
            return;
        }
        tc->api = api;
        tc->done = done;
        tc->ud = ud;
        /* key_param carries the route's query parameter (team_id or team_alias) */
        rt_team_api_handle(api->team_api, method, path, key_param, body, len, team_done, tc);
        return;
    }
    if (strcmp(path, "/key/info") == 0 || strcmp(path, "/key/list") == 0 ? !is_get && !is_post
                                                                          : !is_post) {
        send_error(done, ud, 405, "invalid_request_error", "method_not_allowed", NULL,
                   strcmp(path, "/key/info") == 0 || strcmp(path, "/key/list") == 0
                       ? "use GET or POST"
                       : "use POST");
        return;
    }
    if (atomic_fetch_add(&api->in_flight, 1) >= RT_KEY_API_IN_FLIGHT_MAX) {
        atomic_fetch_sub(&api->in_flight, 1);
        TG_WARN_RL("msg=\"key API: too many requests in progress\" max=%d",
                   RT_KEY_API_IN_FLIGHT_MAX);
        send_error(done, ud, 503, "server_error", "key_store_busy", NULL, MSG_BUSY);
        return;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        atomic_fetch_sub(&api->in_flight, 1);
        rt_answer_500(done, ud);
        return;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->api = api;
    r->caller_done = done;
    r->caller_ud = ud;
    r->done = kreq_answer;
    r->ud = r;
    if (strcmp(path, "/key/generate") == 0) {
        r->op = OP_GENERATE;
        do_generate(r, body, len);
    } else if (strcmp(path, "/key/update") == 0) {
        r->op = OP_UPDATE;
        do_update(r, body, len);
    } else if (strcmp(path, "/key/delete") == 0) {
        r->op = OP_DELETE;
        do_delete(r, body, len);
    } else if (strcmp(path, "/key/block") == 0 || strcmp(path, "/key/unblock") == 0) {
        r->op = OP_BLOCK;
        do_block(r, strcmp(path, "/key/block") == 0, body, len);
    } else if (strcmp(path, "/key/list") == 0) {
        do_list(r, body, len);
    } else if (strcmp(path, "/key/regenerate") == 0) {
        r->op = OP_REGENERATE;
        do_regenerate(r, body, len);
    } else {
        do_info(r, is_get, key_param, body, len);
    }
}
