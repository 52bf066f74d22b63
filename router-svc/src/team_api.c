/* team_api: LiteLLM's /team/... routes. See team_api.h. */
#include "team_api.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "admin_answer.h"
#include "team_extra.h"
#include "tg_err.h"
#include "tg_ids.h"
#include "tg_log.h"
#include "tg_period.h"
#include "tg_time.h"

/* answer cap: a team's view takes at most what its stored form may (RT_TEAM_JSON_MAX: the same
 * members, escaped alike), so a list of RT_TEAM_API_LIST_MAX teams at their largest (16 KiB of
 * stored-only fields each) fits; answers are allocated to their size, not to this */
#define TEAM_BODY_MAX (RT_TEAM_API_LIST_MAX * RT_TEAM_JSON_MAX + 65536)
#define MSG_UNAVAILABLE                                                                            \
    "team store unavailable: the control topic could not confirm the change; retry later"
#define MSG_BUSY "team store busy: too many changes waiting for confirmation; retry later"

struct rt_team_api {
    const struct rt_config *cfg;
    struct rt_teams *teams;
    struct rt_keys *keys;
    struct rt_control *control;
};

enum top { TOP_NEW = 0, TOP_UPDATE, TOP_DELETE, TOP_BLOCK };

enum tfail { TF_NONE = 0, TF_UNAVAIL, TF_BUSY, TF_CAPACITY, TF_INTERNAL };

/* One request in progress (heap, freed by finish). */
struct treq {
    struct rt_team_api *api;
    rt_team_api_done_fn done;
    void *ud;
    enum top op;
    struct rt_team_spec spec;
    uint32_t n_ids;
    char ids[RT_TEAM_API_DELETE_MAX][RT_TEAM_ID_CAP];
    pthread_mutex_t mu;
    uint32_t outstanding;
    enum tfail fail;
    int phase;                              /* delete: 0 the teams' keys, 1 the teams */
    uint32_t n_keys;                        /* delete: keys of the teams (heap, n_keys) */
    char (*keys)[TG_SHA256_HEX_LEN + 1];
};

/* ---- answers ---- */

/* Dump o (taken) and call done (admin_answer.h). */
static void send_json(rt_team_api_done_fn done, void *ud, int status, json_t *o)
{
    rt_answer_json(done, ud, status, o, TEAM_BODY_MAX);
}

static void send_error(rt_team_api_done_fn done, void *ud, int status, const char *type,
                       const char *code, const char *param, const char *message)
{
    rt_answer_error(done, ud, TEAM_BODY_MAX, status, type, code, param, message);
}

/* 400 for a field error "field: problem". */
static void send_field_error(rt_team_api_done_fn done, void *ud, const char *err)
{
    rt_answer_field_error(done, ud, TEAM_BODY_MAX, err);
}

static json_t *limit_json(int64_t v)
{
    return v < 0 ? json_null() : json_integer((json_int_t)v);
}

/* The team's public view (LiteLLM's names). New object or NULL. */
static json_t *team_json(const struct rt_team_spec *t)
{
    json_t *o = json_object(), *models = json_array(), *meta, *extra = NULL;
    char text[64];

    meta = json_loads(t->metadata, 0, NULL);
    if (t->extra[0] != '\0')
        extra = rt_extra_object(t->extra);
    if (o == NULL || models == NULL || meta == NULL || (t->extra[0] != '\0' && extra == NULL)) {
        json_decref(o);
        json_decref(models);
        json_decref(meta);
        json_decref(extra);
        return NULL;
    }
    for (uint32_t i = 0; i < t->n_models; i++)
        json_array_append_new(models, json_string(t->models[i]));
    json_object_set_new(o, "team_id", json_string(t->team_id));
    json_object_set_new(o, "team_alias",
                        t->team_alias[0] != '\0' ? json_string(t->team_alias) : json_null());
    json_object_set_new(o, "models", models);
    json_object_set_new(o, "max_budget", t->max_budget_nusd < 0
                                             ? json_null()
                                             : json_real((double)t->max_budget_nusd / 1e9));
    if (t->budget_duration_s > 0) {
        int64_t reset_ms;

        rt_answer_duration(t->budget_duration_s, text, sizeof(text));
        json_object_set_new(o, "budget_duration", json_string(text));
        tg_period_window(t->budget_duration_s, (int64_t)tg_now_epoch_ms(), NULL, &reset_ms);
        rt_answer_iso8601(reset_ms, text, sizeof(text));
        json_object_set_new(o, "budget_reset_at", json_string(text));
    } else {
        json_object_set_new(o, "budget_duration", json_null());
        json_object_set_new(o, "budget_reset_at", json_null());
    }
    json_object_set_new(o, "rpm_limit", limit_json(t->rpm_limit));
    json_object_set_new(o, "tpm_limit", limit_json(t->tpm_limit));
    json_object_set_new(o, "max_parallel_requests", limit_json(t->max_parallel_requests));
    json_object_set_new(o, "metadata", meta);
    json_object_set_new(o, "blocked", json_boolean(t->blocked));
    /* LiteLLM's shape: the stored-only fields (team_extra.h) where the caller gave them, at the
     * top level (none of them shares a name with the members above) */
    if (extra != NULL) {
        json_object_update(o, extra);
        json_decref(extra);
    }
    /* spend is spend-svc's (GET /spend/report there): not known to the router */
    json_object_set_new(o, "spend", json_null());
    return o;
}

/* ---- request life cycle ---- */

static void req_free(struct treq *r)
{
    pthread_mutex_destroy(&r->mu);
    free(r->keys);
    free(r);
}

static void submit(struct treq *r, const char *id, const struct rt_team_spec *spec);
static void one_done(struct treq *r, enum tfail fail);

static void finish(struct treq *r)
{
    struct rt_team_api *api = r->api;
    json_t *o = NULL;

    switch (r->fail) {
    case TF_NONE:
        break;
    case TF_BUSY:
        send_error(r->done, r->ud, 503, "server_error", "team_store_busy", NULL, MSG_BUSY);
        req_free(r);
        return;
    case TF_CAPACITY: {
        char msg[160];

        snprintf(msg, sizeof(msg),
                 "team store full: the teams table reached its capacity (limits.max_teams = %u)",
                 api->cfg != NULL ? api->cfg->max_teams : 0);
        send_error(r->done, r->ud, 503, "server_error", "teams_capacity", NULL, msg);
        req_free(r);
        return;
    }
    case TF_INTERNAL:
        send_error(r->done, r->ud, 500, "server_error", "internal_error", NULL,
                   "internal error while storing the team change");
        req_free(r);
        return;
    default:
        send_error(r->done, r->ud, 503, "server_error", "team_store_unavailable", NULL,
                   MSG_UNAVAILABLE);
        req_free(r);
        return;
    }
    if (r->op == TOP_DELETE && r->phase == 0) {
        /* the teams' keys are gone: only now the teams, so that a failure leaves no key of a
         * deleted team behind */
        r->phase = 1;
        r->outstanding = r->n_ids + 1; /* +1 while submitting */
        for (uint32_t j = 0; j < r->n_ids; j++)
            submit(r, r->ids[j], NULL);
        one_done(r, TF_NONE);
        return;
    }
    if (r->op == TOP_DELETE) {
        json_t *arr = json_array(), *karr = json_array();

        o = json_object();
        for (uint32_t i = 0; arr != NULL && i < r->n_ids; i++)
            json_array_append_new(arr, json_string(r->ids[i]));
        for (uint32_t i = 0; karr != NULL && i < r->n_keys; i++)
            json_array_append_new(karr, json_string(r->keys[i]));
        if (o != NULL && arr != NULL && karr != NULL) {
            json_object_set_new(o, "deleted_teams", arr);
            json_object_set_new(o, "deleted_keys", karr);
        } else {
            json_decref(arr);
            json_decref(karr);
        }
        send_json(r->done, r->ud, 200, o);
        req_free(r);
        return;
    }
    {
        /* the record as this replica now holds it (applied before the confirmation) */
        struct rt_teams_table *t = rt_teams_acquire(api->teams);
        const struct rt_team_spec *cur = rt_teams_lookup(t, r->spec.team_id);

        o = team_json(cur != NULL ? cur : &r->spec);
        rt_teams_release(&t);
    }
    if (o != NULL && r->op == TOP_UPDATE) {
        json_t *w = json_object();

        if (w != NULL) {
            json_object_set_new(w, "team_id", json_string(r->spec.team_id));
            json_object_set_new(w, "data", o);
        } else {
            json_decref(o);
        }
        o = w;
    }
    send_json(r->done, r->ud, 200, o);
    req_free(r);
}

static void one_done(struct treq *r, enum tfail fail)
{
    int last;

    pthread_mutex_lock(&r->mu);
    if (fail != TF_NONE && (r->fail == TF_NONE || fail == TF_UNAVAIL))
        r->fail = fail;
    last = --r->outstanding == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        finish(r);
}

static void on_published(int status, void *ud)
{
    one_done(ud, status == 0 ? TF_NONE : TF_UNAVAIL);
}

/* Submit one change (spec NULL: delete id); exactly one one_done() follows. */
static void submit(struct treq *r, const char *id, const struct rt_team_spec *spec)
{
    struct rt_team_api *api = r->api;
    int rc;

    if (api->control == NULL) {
        rc = spec != NULL ? rt_teams_put(api->teams, spec) : rt_teams_delete(api->teams, id);
        one_done(r, rc == 0 ? TF_NONE : rc == TG_EFULL ? TF_CAPACITY : TF_INTERNAL);
        return;
    }
    rc = rt_control_publish_team(api->control, id, spec, on_published, r);
    if (rc != 0)
        one_done(r, rc == TG_EFULL ? TF_BUSY : rc == TG_EUNAVAIL ? TF_UNAVAIL : TF_INTERNAL);
}

/* Submit the deletion of key hash (phase 0 of /team/delete); exactly one one_done() follows. */
static void submit_key_delete(struct treq *r, const char *hash)
{
    struct rt_team_api *api = r->api;
    int rc;

    if (api->control == NULL) {
        struct rt_key_change ch;

        memset(&ch, 0, sizeof(ch));
        ch.op = RT_KEY_DELETE;
        memcpy(ch.hash, hash, sizeof(ch.hash));
        rc = rt_keys_apply(api->keys, &ch, 1);
        one_done(r, rc == 0 ? TF_NONE : TF_INTERNAL);
        return;
    }
    {
        struct rt_control_record rec;

        memset(&rec, 0, sizeof(rec));
        rec.op = RT_KEY_DELETE;
        memcpy(rec.hash, hash, sizeof(rec.hash));
        rc = rt_control_publish(api->control, &rec, on_published, r);
    }
    if (rc != 0)
        one_done(r, rc == TG_EFULL ? TF_BUSY : rc == TG_EUNAVAIL ? TF_UNAVAIL : TF_INTERNAL);
}

/* The keys of the teams r->ids (not those of the config file, which only it changes), into
 * r->keys: a walk of the keys table, bounded by its size. */
struct team_keys {
    struct treq *r;
    const struct rt_config *cfg;
    uint32_t cap;
    int oom;
};

static int is_config_key(const struct rt_config *cfg, const char *hash)
{
    for (size_t i = 0; cfg != NULL && i < cfg->n_keys; i++) {
        if (strcmp(cfg->keys[i].key_hash, hash) == 0)
            return 1;
    }
    return 0;
}

static int collect_key(const struct rt_key *key, int present, void *arg)
{
    struct team_keys *c = arg;
    struct treq *r = c->r;
    uint32_t j;

    if (!present || key->team_id[0] == '\0' || is_config_key(c->cfg, key->hash))
        return 0;
    for (j = 0; j < r->n_ids && strcmp(key->team_id, r->ids[j]) != 0; j++)
        ;
    if (j == r->n_ids)
        return 0;
    if (r->n_keys == c->cap) {
        uint32_t cap = c->cap > 0 ? c->cap * 2 : 64;
        void *grown = realloc(r->keys, (size_t)cap * sizeof(r->keys[0]));

        if (grown == NULL) {
            c->oom = 1;
            return 1;
        }
        r->keys = grown;
        c->cap = cap;
    }
    memcpy(r->keys[r->n_keys++], key->hash, TG_SHA256_HEX_LEN + 1);
    return 0;
}

/* ---- body helpers ---- */

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
        snprintf(err, errlen, "body: invalid JSON at line %d column %d, or a member given twice",
                 jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        snprintf(err, errlen, "body: expected a JSON object");
        return NULL;
    }
    return o;
}

/* The team_id member of o into id: 0, or a field error in err. */
static int team_id_of(const json_t *o, char id[RT_TEAM_ID_CAP], char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, "team_id");

    if (v == NULL) {
        snprintf(err, errlen, "team_id: required");
        return TG_EINVAL;
    }
    if (!json_is_string(v) || json_string_length(v) > PROTO_CTL_TEAM_ID_MAX ||
        strlen(json_string_value(v)) != json_string_length(v) ||
        !proto_ctl_team_id_ok(json_string_value(v))) {
        snprintf(err, errlen, "team_id: expected 1 to 64 letters, digits or \"-_.:@\"");
        return TG_EINVAL;
    }
    memcpy(id, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* The team_id of a JSON body into id: 0, or the field error answered and r freed. */
static int body_team_id(struct treq *r, const char *body, size_t len, char id[RT_TEAM_ID_CAP])
{
    char err[320];
    json_t *o = parse_body(body, len, 0, err, sizeof(err));
    int rc = o == NULL ? TG_EINVAL : team_id_of(o, id, err, sizeof(err));

    json_decref(o);
    if (rc != 0) {
        send_field_error(r->done, r->ud, err);
        req_free(r);
    }
    return rc;
}

/* Copy the current team id into spec; 0, or 404 sent (returns TG_ENOTFOUND). */
static int current(struct treq *r, const char *id)
{
    struct rt_teams_table *t = rt_teams_acquire(r->api->teams);
    const struct rt_team_spec *cur = rt_teams_lookup(t, id);

    if (cur != NULL)
        rt_team_spec_copy(&r->spec, cur);
    rt_teams_release(&t);
    if (cur == NULL) {
        char msg[128];

        snprintf(msg, sizeof(msg), "team not found: team_id=%s", id);
        send_error(r->done, r->ud, 404, "invalid_request_error", "team_not_found", "team_id",
                   msg);
        return TG_ENOTFOUND;
    }
    return 0;
}

/* ---- routes ---- */

static void do_new(struct treq *r, const char *body, size_t len)
{
    struct rt_team_api *api = r->api;
    char err[320];
    struct rt_teams_table *t;
    const struct rt_team_spec *cur;
    size_t n;

    rt_team_spec_init(&r->spec);
    if (body == NULL || len == 0) {
        body = "{}";
        len = 2;
    }
    if (rt_team_spec_from_json(&r->spec, RT_TEAM_JSON_API, body, len, api->cfg, err,
                               sizeof(err)) != 0) {
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    if (r->spec.team_id[0] == '\0' && tg_uuid_v4(r->spec.team_id) != 0) {
        r->fail = TF_INTERNAL;
        finish(r);
        return;
    }
    t = rt_teams_acquire(api->teams);
    cur = rt_teams_lookup(t, r->spec.team_id);
    n = rt_teams_count(t);
    rt_teams_release(&t);
    if (cur != NULL) {
        send_error(r->done, r->ud, 409, "invalid_request_error", "team_exists", "team_id",
                   "team_id: a team with this id exists (use /team/update)");
        req_free(r);
        return;
    }
    if (api->cfg != NULL && n >= api->cfg->max_teams) {
        rt_teams_note_full(api->teams);
        TG_WARN_RL("msg=\"teams table full: /team/new refused\" max_teams=%u",
                   api->cfg->max_teams);
        r->fail = TF_CAPACITY;
        finish(r);
        return;
    }
    r->outstanding = 1;
    submit(r, r->spec.team_id, &r->spec);
}

static void do_update(struct treq *r, const char *body, size_t len)
{
    char err[320], id[RT_TEAM_ID_CAP];

    if (body_team_id(r, body, len, id) != 0)
        return;
    if (current(r, id) != 0) {
        req_free(r);
        return;
    }
    if (rt_team_spec_from_json(&r->spec, RT_TEAM_JSON_API, body, len, r->api->cfg, err,
                               sizeof(err)) != 0) {
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    r->outstanding = 1;
    submit(r, r->spec.team_id, &r->spec);
}

static void do_block(struct treq *r, int block, const char *body, size_t len)
{
    char err[320], id[RT_TEAM_ID_CAP];
    json_t *o = parse_body(body, len, 0, err, sizeof(err));
    const char *k;
    json_t *v;

    if (o == NULL || team_id_of(o, id, err, sizeof(err)) != 0) {
        json_decref(o);
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    json_object_foreach(o, k, v)
    {
        if (strcmp(k, "team_id") != 0) {
            snprintf(err, sizeof(err), "%.64s: unknown field", k);
            json_decref(o);
            send_field_error(r->done, r->ud, err);
            req_free(r);
            return;
        }
    }
    json_decref(o);
    if (current(r, id) != 0) {
        req_free(r);
        return;
    }
    r->spec.blocked = block;
    r->outstanding = 1;
    submit(r, r->spec.team_id, &r->spec);
}

static void do_delete(struct treq *r, const char *body, size_t len)
{
    char err[320];
    json_t *o = parse_body(body, len, 0, err, sizeof(err)), *ids, *v;
    const char *k;
    size_t i;

    if (o == NULL) {
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    json_object_foreach(o, k, v)
    {
        if (strcmp(k, "team_ids") != 0) {
            snprintf(err, sizeof(err), "%.64s: unknown field", k);
            goto bad;
        }
    }
    ids = json_object_get(o, "team_ids");
    if (!json_is_array(ids) || json_array_size(ids) == 0) {
        snprintf(err, sizeof(err), "team_ids: expected a non-empty array of team ids");
        goto bad;
    }
    if (json_array_size(ids) > RT_TEAM_API_DELETE_MAX) {
        snprintf(err, sizeof(err), "team_ids: at most %d per request", RT_TEAM_API_DELETE_MAX);
        goto bad;
    }
    json_array_foreach(ids, i, v)
    {
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
            !proto_ctl_team_id_ok(json_string_value(v))) {
            snprintf(err, sizeof(err), "team_ids[%zu]: expected a team id", i);
            goto bad;
        }
        memcpy(r->ids[r->n_ids++], json_string_value(v), json_string_length(v) + 1);
    }
    json_decref(o);
    /* every team must exist: nothing is deleted when one does not */
    for (uint32_t j = 0; j < r->n_ids; j++) {
        if (current(r, r->ids[j]) != 0) {
            req_free(r);
            return;
        }
    }
    {
        struct team_keys c = {.r = r, .cfg = r->api->cfg, .cap = 0, .oom = 0};
        struct rt_keys_table *t = rt_keys_acquire(r->api->keys);

        rt_keys_foreach(t, collect_key, &c);
        rt_keys_release(&t);
        if (c.oom) {
            send_error(r->done, r->ud, 500, "server_error", "internal_error", NULL,
                       "out of memory listing the teams' keys");
            req_free(r);
            return;
        }
    }
    /* phase 0: the keys (none: finish() goes on to the teams at once) */
    r->phase = 0;
    r->outstanding = r->n_keys + 1; /* +1 while submitting */
    for (uint32_t j = 0; j < r->n_keys; j++)
        submit_key_delete(r, r->keys[j]);
    one_done(r, TF_NONE);
    return;
bad:
    json_decref(o);
    send_field_error(r->done, r->ud, err);
    req_free(r);
}

struct key_list {
    const char *team_id;
    json_t *arr;
    size_t n;
};

static int key_of_team(const struct rt_key *key, int present, void *arg)
{
    struct key_list *l = arg;

    if (present && strcmp(key->team_id, l->team_id) == 0 && l->n < RT_TEAM_API_INFO_KEYS_MAX) {
        json_array_append_new(l->arr, json_string(key->hash));
        l->n++;
    }
    return 0;
}

static void do_info(struct treq *r, int is_get, const char *param, const char *body, size_t len)
{
    struct rt_team_api *api = r->api;
    char id[RT_TEAM_ID_CAP];
    json_t *o, *info;

    if (is_get) {
        if (param == NULL || !proto_ctl_team_id_ok(param)) {
            send_field_error(r->done, r->ud,
                             "team_id: expected ?team_id= with 1 to 64 letters, digits or "
                             "\"-_.:@\"");
            req_free(r);
            return;
        }
        snprintf(id, sizeof(id), "%s", param);
    } else if (body_team_id(r, body, len, id) != 0) {
        return;
    }
    if (current(r, id) != 0) {
        req_free(r);
        return;
    }
    info = team_json(&r->spec);
    o = json_object();
    if (o != NULL && info != NULL) {
        struct key_list l = {r->spec.team_id, json_array(), 0};

        json_object_set_new(o, "team_id", json_string(r->spec.team_id));
        json_object_set_new(o, "team_info", info);
        if (l.arr != NULL && api->keys != NULL) {
            struct rt_keys_table *kt = rt_keys_acquire(api->keys);

            rt_keys_foreach(kt, key_of_team, &l);
            rt_keys_release(&kt);
        }
        json_object_set_new(o, "keys", l.arr != NULL ? l.arr : json_array());
    } else {
        json_decref(info);
        json_decref(o);
        o = NULL;
    }
    send_json(r->done, r->ud, 200, o);
    req_free(r);
}

static void do_list(struct treq *r, const char *param, const char *body, size_t len)
{
    struct rt_team_api *api = r->api;
    char err[320], alias[RT_ID_CAP] = "";
    int has_alias = 0;
    struct rt_teams_table *t;
    json_t *arr;
    size_t n = 0;

    if (param != NULL) {
        snprintf(alias, sizeof(alias), "%s", param);
        has_alias = 1;
    } else if (body != NULL && len > 0) {
        json_t *o = parse_body(body, len, 1, err, sizeof(err)), *v;
        const char *k;

        if (o == NULL) {
            send_field_error(r->done, r->ud, err);
            req_free(r);
            return;
        }
        json_object_foreach(o, k, v)
        {
            if (strcmp(k, "team_alias") != 0 || !json_is_string(v) ||
                json_string_length(v) >= sizeof(alias)) {
                snprintf(err, sizeof(err), "%.64s: %s", k,
                         strcmp(k, "team_alias") != 0 ? "unknown field"
                                                      : "expected a string of at most 64 bytes");
                json_decref(o);
                send_field_error(r->done, r->ud, err);
                req_free(r);
                return;
            }
            snprintf(alias, sizeof(alias), "%s", json_string_value(v));
            has_alias = 1;
        }
        json_decref(o);
    }
    arr = json_array();
    t = rt_teams_acquire(api->teams);
    for (size_t i = 0; arr != NULL && i < rt_teams_count(t); i++) {
        const struct rt_team_spec *s = rt_teams_at(t, i);

        if (has_alias && strcmp(s->team_alias, alias) != 0)
            continue;
        if (++n > RT_TEAM_API_LIST_MAX)
            break;
        json_array_append_new(arr, team_json(s));
    }
    rt_teams_release(&t);
    if (n > RT_TEAM_API_LIST_MAX) {
        json_decref(arr);
        snprintf(err, sizeof(err),
                 "body: more than %d teams match: filter with team_alias",
                 RT_TEAM_API_LIST_MAX);
        send_field_error(r->done, r->ud, err);
        req_free(r);
        return;
    }
    send_json(r->done, r->ud, 200, arr);
    req_free(r);
}

/* ---- public ---- */

struct rt_team_api *rt_team_api_create(const struct rt_config *cfg, struct rt_teams *teams,
                                       struct rt_keys *keys, struct rt_control *control,
                                       char *err, size_t errlen)
{
    struct rt_team_api *api;

    if (teams == NULL) {
        snprintf(err, errlen, "team api: a teams table is required");
        return NULL;
    }
    api = calloc(1, sizeof(*api));
    if (api == NULL) {
        snprintf(err, errlen, "team api: out of memory");
        return NULL;
    }
    api->cfg = cfg;
    api->teams = teams;
    api->keys = keys;
    api->control = control;
    return api;
}

void rt_team_api_destroy(struct rt_team_api **api)
{
    if (api == NULL || *api == NULL)
        return;
    free(*api);
    *api = NULL;
}

int rt_team_api_is_path(const char *path)
{
    static const char *const paths[] = {"/team/new",  "/team/update", "/team/info",
                                        "/team/list", "/team/delete", "/team/block",
                                        "/team/unblock"};

    for (size_t i = 0; path != NULL && i < sizeof(paths) / sizeof(paths[0]); i++) {
        if (strcmp(path, paths[i]) == 0)
            return 1;
    }
    return 0;
}

void rt_team_api_handle(struct rt_team_api *api, const char *method, const char *path,
                        const char *param, const char *body, size_t len, rt_team_api_done_fn done,
                        void *ud)
{
    int is_get = method != NULL && strcmp(method, "GET") == 0;
    int is_post = method != NULL && strcmp(method, "POST") == 0;
    int read_only = path != NULL && (strcmp(path, "/team/info") == 0 ||
                                      strcmp(path, "/team/list") == 0);
    struct treq *r;

    if (!rt_team_api_is_path(path)) {
        send_error(done, ud, 404, "invalid_request_error", "not_found", NULL,
                   "unknown team API path");
        return;
    }
    if (read_only ? !is_get && !is_post : !is_post) {
        send_error(done, ud, 405, "invalid_request_error", "method_not_allowed", NULL,
                   read_only ? "use GET or POST" : "use POST");
        return;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rt_answer_500(done, ud);
        return;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->api = api;
    r->done = done;
    r->ud = ud;
    if (strcmp(path, "/team/new") == 0) {
        r->op = TOP_NEW;
        do_new(r, body, len);
    } else if (strcmp(path, "/team/update") == 0) {
        r->op = TOP_UPDATE;
        do_update(r, body, len);
    } else if (strcmp(path, "/team/delete") == 0) {
        r->op = TOP_DELETE;
        do_delete(r, body, len);
    } else if (strcmp(path, "/team/block") == 0 || strcmp(path, "/team/unblock") == 0) {
        r->op = TOP_BLOCK;
        do_block(r, strcmp(path, "/team/block") == 0, body, len);
    } else if (strcmp(path, "/team/info") == 0) {
        do_info(r, is_get, param, body, len);
    } else {
        do_list(r, is_get ? param : NULL, is_get ? NULL : body, len);
    }
}
