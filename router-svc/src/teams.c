/* teams: the teams table and team specs as JSON. See teams.h. */
#include "teams.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "team_extra.h"
#include "tg_err.h"
#include "tg_units.h"

/* A record: reference counted (one reference per snapshot holding it), immutable once built.
 * Allocated up to the NUL of spec.extra (rec_size), not to sizeof(struct trec). */
struct trec {
    _Atomic uint32_t refs;
    struct rt_team_spec spec;
};

struct rt_teams_table {
    _Atomic uint32_t refs;
    size_t n;
    struct trec **items; /* sorted by team_id */
};

struct rt_teams {
    pthread_mutex_t swap_lock;   /* held only to load+ref or swap `current` */
    pthread_mutex_t writer_lock; /* serialises writers */
    struct rt_teams_table *current;
    size_t max_teams;
    _Atomic uint64_t generation;
    _Atomic uint64_t full_rejections;
};

void rt_team_spec_init(struct rt_team_spec *spec)
{
    memset(spec, 0, sizeof(*spec));
    spec->max_budget_nusd = RT_LIMIT_NONE;
    spec->rpm_limit = RT_LIMIT_NONE;
    spec->tpm_limit = RT_LIMIT_NONE;
    spec->max_parallel_requests = RT_LIMIT_NONE;
    snprintf(spec->metadata, sizeof(spec->metadata), "{}");
}

/* The bytes of spec up to and including its extra's NUL (spec->extra is NUL-terminated). */
static size_t spec_used(const struct rt_team_spec *spec)
{
    return offsetof(struct rt_team_spec, extra) + strlen(spec->extra) + 1;
}

void rt_team_spec_copy(struct rt_team_spec *dst, const struct rt_team_spec *src)
{
    if (dst != src)
        memcpy(dst, src, spec_used(src));
}

/* ---- table ---- */

static void rec_unref(struct trec *r)
{
    if (r != NULL && atomic_fetch_sub(&r->refs, 1) == 1)
        free(r);
}

static void table_free(struct rt_teams_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++)
        rec_unref(t->items[i]);
    free(t->items);
    free(t);
}

static struct rt_teams_table *table_new(size_t n)
{
    struct rt_teams_table *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->items = calloc(n > 0 ? n : 1, sizeof(*t->items));
    if (t->items == NULL) {
        free(t);
        return NULL;
    }
    atomic_store(&t->refs, 1);
    return t;
}

struct rt_teams *rt_teams_create(size_t max_teams, char *err, size_t errlen)
{
    struct rt_teams *teams;

    if (max_teams == 0) {
        snprintf(err, errlen, "teams: max_teams must be at least 1");
        return NULL;
    }
    teams = calloc(1, sizeof(*teams));
    if (teams == NULL || (teams->current = table_new(0)) == NULL) {
        free(teams);
        snprintf(err, errlen, "teams: out of memory");
        return NULL;
    }
    pthread_mutex_init(&teams->swap_lock, NULL);
    pthread_mutex_init(&teams->writer_lock, NULL);
    teams->max_teams = max_teams;
    atomic_store(&teams->generation, 1);
    return teams;
}

void rt_teams_destroy(struct rt_teams **teams)
{
    if (teams == NULL || *teams == NULL)
        return;
    rt_teams_release(&(*teams)->current);
    pthread_mutex_destroy(&(*teams)->swap_lock);
    pthread_mutex_destroy(&(*teams)->writer_lock);
    free(*teams);
    *teams = NULL;
}

struct rt_teams_table *rt_teams_acquire(struct rt_teams *teams)
{
    struct rt_teams_table *t;

    if (teams == NULL)
        return NULL;
    pthread_mutex_lock(&teams->swap_lock);
    t = teams->current;
    atomic_fetch_add(&t->refs, 1);
    pthread_mutex_unlock(&teams->swap_lock);
    return t;
}

void rt_teams_release(struct rt_teams_table **table)
{
    if (table == NULL || *table == NULL)
        return;
    if (atomic_fetch_sub(&(*table)->refs, 1) == 1)
        table_free(*table);
    *table = NULL;
}

/* find: index of id in t, or where it would go (*found 0). */
static size_t find(const struct rt_teams_table *t, const char *id, int *found)
{
    size_t lo = 0, hi = t->n;

    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(t->items[mid]->spec.team_id, id);

        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const struct rt_team_spec *rt_teams_lookup(const struct rt_teams_table *table, const char *id)
{
    int found;
    size_t i;

    if (table == NULL || id == NULL || id[0] == '\0')
        return NULL;
    i = find(table, id, &found);
    return found ? &table->items[i]->spec : NULL;
}

size_t rt_teams_count(const struct rt_teams_table *table)
{
    return table != NULL ? table->n : 0;
}

const struct rt_team_spec *rt_teams_at(const struct rt_teams_table *table, size_t i)
{
    if (table == NULL || i >= table->n)
        return NULL;
    return &table->items[i]->spec;
}

/* change: put (spec != NULL) or delete id; builds the next snapshot and swaps it in. */
static int change(struct rt_teams *teams, const char *id, const struct rt_team_spec *spec)
{
    struct rt_teams_table *cur, *next = NULL;
    struct trec *rec = NULL;
    size_t pos, n;
    int found, rc = 0;

    if (!proto_ctl_team_id_ok(id))
        return TG_EINVAL;
    if (spec != NULL) {
        if (memchr(spec->extra, '\0', sizeof(spec->extra)) == NULL)
            return TG_EINVAL;
        /* a team without stored-only fields costs its fixed part only */
        rec = malloc(offsetof(struct trec, spec) + spec_used(spec));
        if (rec == NULL)
            return TG_ENOMEM;
        atomic_store(&rec->refs, 1);
        rt_team_spec_copy(&rec->spec, spec);
    }
    pthread_mutex_lock(&teams->writer_lock);
    cur = teams->current; /* writers are serialised: current cannot change under us */
    pos = find(cur, id, &found);
    if (spec == NULL && !found)
        goto out; /* nothing to delete */
    if (spec != NULL && !found && cur->n >= teams->max_teams) {
        atomic_fetch_add(&teams->full_rejections, 1);
        rc = TG_EFULL;
        goto out;
    }
    n = cur->n + (spec != NULL && !found) - (spec == NULL);
    next = table_new(n);
    if (next == NULL) {
        rc = TG_ENOMEM;
        goto out;
    }
    for (size_t i = 0, o = 0; i <= cur->n; i++) {
        if (i == pos && spec != NULL) {
            next->items[o++] = rec;
            rec = NULL;
            if (found)
                continue; /* replaced */
        } else if (i == pos && found) {
            continue; /* deleted */
        }
        if (i < cur->n) {
            atomic_fetch_add(&cur->items[i]->refs, 1);
            next->items[o++] = cur->items[i];
        }
    }
    next->n = n;
    pthread_mutex_lock(&teams->swap_lock);
    teams->current = next;
    pthread_mutex_unlock(&teams->swap_lock);
    atomic_fetch_add(&teams->generation, 1);
    rt_teams_release(&cur); /* the store's reference to the old snapshot */
out:
    pthread_mutex_unlock(&teams->writer_lock);
    rec_unref(rec);
    return rc;
}

int rt_teams_put(struct rt_teams *teams, const struct rt_team_spec *spec)
{
    if (teams == NULL || spec == NULL)
        return TG_EINVAL;
    return change(teams, spec->team_id, spec);
}

int rt_teams_delete(struct rt_teams *teams, const char *id)
{
    if (teams == NULL)
        return TG_EINVAL;
    return change(teams, id, NULL);
}

void rt_teams_note_full(struct rt_teams *teams)
{
    atomic_fetch_add(&teams->full_rejections, 1);
}

void rt_teams_get_stats(struct rt_teams *teams, struct rt_teams_stats *out)
{
    struct rt_teams_table *t = rt_teams_acquire(teams);

    memset(out, 0, sizeof(*out));
    out->count = rt_teams_count(t);
    out->capacity = teams->max_teams;
    out->generation = atomic_load(&teams->generation);
    out->full_rejections = atomic_load(&teams->full_rejections);
    rt_teams_release(&t);
}

int rt_team_allows(const struct rt_team_spec *team, const char *name)
{
    if (team == NULL || team->n_models == 0)
        return 1;
    for (uint32_t i = 0; i < team->n_models; i++) {
        if (strcmp(team->models[i], name) == 0)
            return 1;
    }
    return 0;
}

/* ---- JSON ---- */

static int jfail(char *err, size_t errlen, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int jfail(char *err, size_t errlen, const char *field, const char *fmt, ...)
{
    char problem[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", field, problem);
    return TG_EINVAL;
}

/* A string member into dst (cap bytes incl. NUL); null = "". */
static int j_str(const json_t *v, const char *field, char *dst, size_t cap, char *err,
                 size_t errlen)
{
    size_t n;

    if (json_is_null(v)) {
        dst[0] = '\0';
        return 0;
    }
    if (!json_is_string(v))
        return jfail(err, errlen, field, "expected a string or null");
    n = json_string_length(v);
    if (n >= cap)
        return jfail(err, errlen, field, "too long (%zu bytes, max %zu)", n, cap - 1);
    if (memchr(json_string_value(v), '\0', n) != NULL)
        return jfail(err, errlen, field, "contains a NUL byte");
    memcpy(dst, json_string_value(v), n + 1);
    return 0;
}

static int j_limit(const json_t *v, const char *field, int64_t *out, char *err, size_t errlen)
{
    if (json_is_null(v)) {
        *out = RT_LIMIT_NONE;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return jfail(err, errlen, field, "expected a non-negative integer or null");
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* 1 when name is a model group or a global alias of cfg (NULL: anything goes). */
static int known_model(const struct rt_config *cfg, const char *name)
{
    if (cfg == NULL || rt_config_has_group(cfg, name))
        return 1;
    for (uint32_t i = 0; i < cfg->n_aliases; i++) {
        if (strcmp(cfg->aliases[i].alias, name) == 0)
            return 1;
    }
    return 0;
}

static int j_models(const json_t *v, struct rt_team_spec *s, const struct rt_config *cfg,
                    char *err, size_t errlen)
{
    size_t i;
    json_t *e;
    char f[32];

    if (json_is_null(v)) {
        s->n_models = 0;
        return 0;
    }
    if (!json_is_array(v))
        return jfail(err, errlen, "models", "expected an array of model names or null");
    if (json_array_size(v) > RT_TEAM_MODELS_MAX)
        return jfail(err, errlen, "models", "too many entries (max %d)", RT_TEAM_MODELS_MAX);
    s->n_models = 0;
    json_array_foreach(v, i, e)
    {
        char *dst = s->models[s->n_models];

        snprintf(f, sizeof(f), "models[%zu]", i);
        if (!json_is_string(e) || json_string_length(e) == 0)
            return jfail(err, errlen, f, "expected a non-empty string");
        if (j_str(e, f, dst, RT_NAME_CAP, err, errlen) != 0)
            return TG_EINVAL;
        if (!known_model(cfg, dst))
            return jfail(err, errlen, f, "unknown model group or alias \"%s\"", dst);
        for (uint32_t k = 0; k < s->n_models; k++) {
            if (strcmp(s->models[k], dst) == 0)
                return jfail(err, errlen, f, "\"%s\" is listed twice", dst);
        }
        s->n_models++;
    }
    return 0;
}

static int j_metadata(const json_t *v, struct rt_team_spec *s, char *err, size_t errlen)
{
    size_t n;

    if (json_is_null(v)) {
        snprintf(s->metadata, sizeof(s->metadata), "{}");
        return 0;
    }
    if (!json_is_object(v))
        return jfail(err, errlen, "metadata", "expected an object or null");
    n = json_dumpb(v, s->metadata, sizeof(s->metadata) - 1, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (n == 0 || n >= sizeof(s->metadata) - 1) {
        snprintf(s->metadata, sizeof(s->metadata), "{}");
        return jfail(err, errlen, "metadata", "larger than %d bytes as compact JSON",
                     RT_TEAM_METADATA_MAX - 1);
    }
    s->metadata[n] = '\0';
    return 0;
}

/* The stored-only fields of a body (team_extra.h), applied to the spec after its members. */
struct jextra {
    json_t *pending; /* the fields given (null: removed), NULL when none */
    int replace;     /* 1: the stored form's "extra": the whole set, not a change */
};

/* One member k = v of a body of the given form. */
static int j_member(struct rt_team_spec *s, enum rt_team_json_form form, const char *k,
                    json_t *v, const struct rt_config *cfg, struct jextra *x, char *err,
                    size_t errlen)
{
    if (strcmp(k, "team_id") == 0) {
        char id[RT_TEAM_ID_CAP];

        if (!json_is_string(v) || json_string_length(v) > PROTO_CTL_TEAM_ID_MAX ||
            j_str(v, k, id, sizeof(id), err, errlen) != 0 || !proto_ctl_team_id_ok(id))
            return jfail(err, errlen, k,
                         "expected 1 to 64 letters, digits or \"-_.:@\" (e.g. a UUID)");
        memcpy(s->team_id, id, sizeof(id));
        return 0;
    }
    if (strcmp(k, "team_alias") == 0)
        return j_str(v, k, s->team_alias, sizeof(s->team_alias), err, errlen);
    if (strcmp(k, "models") == 0)
        return j_models(v, s, cfg, err, errlen);
    if (strcmp(k, "rpm_limit") == 0)
        return j_limit(v, k, &s->rpm_limit, err, errlen);
    if (strcmp(k, "tpm_limit") == 0)
        return j_limit(v, k, &s->tpm_limit, err, errlen);
    if (strcmp(k, "max_parallel_requests") == 0)
        return j_limit(v, k, &s->max_parallel_requests, err, errlen);
    if (strcmp(k, "metadata") == 0)
        return j_metadata(v, s, err, errlen);
    if (strcmp(k, "blocked") == 0) {
        if (json_is_null(v)) {
            s->blocked = 0;
            return 0;
        }
        if (!json_is_boolean(v))
            return jfail(err, errlen, k, "expected true, false or null");
        s->blocked = json_is_true(v);
        return 0;
    }
    if (form == RT_TEAM_JSON_API) {
        if (strcmp(k, "max_budget") == 0) {
            char num[64];
            int64_t fusd = 0;

            if (json_is_null(v)) {
                s->max_budget_nusd = RT_LIMIT_NONE;
                return 0;
            }
            if (!json_is_number(v) || json_number_value(v) < 0)
                return jfail(err, errlen, k, "expected a non-negative number (USD) or null");
            snprintf(num, sizeof(num), "%.15g", json_number_value(v));
            if (tg_parse_usd_fusd(num, &fusd) != 0)
                return jfail(err, errlen, k, "out of range");
            s->max_budget_nusd = fusd / 1000000;
            return 0;
        }
        if (strcmp(k, "budget_duration") == 0) {
            if (json_is_null(v)) {
                s->budget_duration_s = 0;
                return 0;
            }
            if (!json_is_string(v) ||
                tg_parse_duration_s(json_string_value(v), &s->budget_duration_s) != 0) {
                s->budget_duration_s = 0;
                return jfail(err, errlen, k, "expected a duration like 30s, 10m, 1h, 7d or 1mo");
            }
            return 0;
        }
        if (rt_extra_is_field(&rt_team_extra, k))
            return rt_extra_note(&rt_team_extra, &x->pending, k, v, err, errlen);
        return jfail(err, errlen, k, "unknown field");
    }
    if (strcmp(k, "extra") == 0) {
        x->replace = 1;
        return rt_extra_note_stored(&rt_team_extra, &x->pending, v, err, errlen);
    }
    if (strcmp(k, "max_budget_nusd") == 0)
        return j_limit(v, k, &s->max_budget_nusd, err, errlen);
    if (strcmp(k, "budget_duration_s") == 0) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return jfail(err, errlen, k, "expected a non-negative integer");
        s->budget_duration_s = (int64_t)json_integer_value(v);
        return 0;
    }
    return jfail(err, errlen, k, "unknown field");
}

int rt_team_spec_from_json(struct rt_team_spec *spec, enum rt_team_json_form form,
                           const char *json, size_t len, const struct rt_config *cfg, char *err,
                           size_t errlen)
{
    json_error_t jerr;
    json_t *o, *v;
    const char *k;
    struct jextra x = {NULL, 0};
    int rc = 0;

    if (json == NULL || len > RT_TEAM_JSON_MAX + 65536)
        return jfail(err, errlen, "body", "missing or larger than %d bytes",
                     RT_TEAM_JSON_MAX + 65536);
    o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (o == NULL)
        return jfail(err, errlen, "body", "invalid JSON at line %d column %d, or a member "
                                          "given twice",
                     jerr.line, jerr.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return jfail(err, errlen, "body", "expected a JSON object");
    }
    json_object_foreach(o, k, v)
    {
        rc = j_member(spec, form, k, v, cfg, &x, err, errlen);
        if (rc != 0)
            break;
    }
    json_decref(o);
    if (rc == 0 && (x.pending != NULL || x.replace))
        rc = rt_extra_apply(&rt_team_extra, spec->extra, sizeof(spec->extra), x.pending,
                            x.replace, err, errlen);
    json_decref(x.pending);
    return rc;
}

static json_t *limit_value(int64_t v)
{
    return v < 0 ? json_null() : json_integer((json_int_t)v);
}

int rt_team_spec_to_json(const struct rt_team_spec *s, char *out, size_t cap, size_t *outlen)
{
    json_t *o = json_object(), *models = json_array(), *meta = NULL;
    size_t n;
    int rc = TG_ENOMEM;

    if (o == NULL || models == NULL)
        goto out;
    if (!proto_ctl_team_id_ok(s->team_id)) {
        rc = TG_EINVAL;
        goto out;
    }
    meta = json_loads(s->metadata, JSON_REJECT_DUPLICATES, NULL);
    if (meta == NULL || !json_is_object(meta)) {
        rc = TG_EINVAL;
        goto out;
    }
    for (uint32_t i = 0; i < s->n_models && i < RT_TEAM_MODELS_MAX; i++)
        json_array_append_new(models, json_string(s->models[i]));
    json_object_set_new(o, "team_id", json_string(s->team_id));
    json_object_set_new(o, "team_alias", json_string(s->team_alias));
    json_object_set_new(o, "models", models);
    models = NULL;
    json_object_set_new(o, "max_budget_nusd", limit_value(s->max_budget_nusd));
    json_object_set_new(o, "budget_duration_s", json_integer((json_int_t)s->budget_duration_s));
    json_object_set_new(o, "rpm_limit", limit_value(s->rpm_limit));
    json_object_set_new(o, "tpm_limit", limit_value(s->tpm_limit));
    json_object_set_new(o, "max_parallel_requests", limit_value(s->max_parallel_requests));
    json_object_set_new(o, "metadata", meta);
    meta = NULL;
    json_object_set_new(o, "blocked", json_boolean(s->blocked));
    if (s->extra[0] != '\0') {
        json_t *extra = rt_extra_object(s->extra);

        if (extra == NULL) {
            rc = TG_EINVAL; /* not from rt_team_spec_from_json */
            goto out;
        }
        json_object_set_new(o, "extra", extra);
    }
    /* the extra fields' numbers as extra_fields.c wrote them (the rest are integers) */
    n = json_dumpb(o, out, cap, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    if (n == 0 || n >= cap) {
        rc = n == 0 ? TG_ENOMEM : TG_ETOOBIG;
        goto out;
    }
    out[n] = '\0';
    *outlen = n;
    rc = 0;
out:
    json_decref(o);
    json_decref(models);
    json_decref(meta);
    return rc;
}

int rt_teams_control_decode(const char *rkey, size_t rklen, const char *value, size_t len,
                            struct rt_team_spec *spec, int *is_put, char *err, size_t errlen)
{
    char id[RT_TEAM_ID_CAP];
    int rc = proto_ctl_parse_team_key(rkey, rklen, id, err, errlen);

    if (rc != 0)
        return rc;
    rt_team_spec_init(spec);
    memcpy(spec->team_id, id, sizeof(id));
    *is_put = value != NULL;
    if (value == NULL)
        return 0;
    rc = rt_team_spec_from_json(spec, RT_TEAM_JSON_STORED, value, len, NULL, err, errlen);
    if (rc != 0)
        return rc;
    if (strcmp(spec->team_id, id) != 0)
        return jfail(err, errlen, "team_id", "does not match the record key");
    return 0;
}
