#include "fl_model.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"
#include "tg_hash.h"

struct fl_slot {
    char name[FL_MODEL_NAME_MAX + 1];
    struct fl_behaviour cfg;  /* the model's own fields (set bits say which) */
    struct fl_behaviour base; /* baseline from the config file, for reset */
    struct fl_counters c;
    uint64_t rng; /* splitmix64 state */
};

struct fl_table {
    pthread_mutex_t lock;
    struct fl_slot *slots; /* cap entries, len used */
    size_t cap;
    size_t len;
    uint32_t *index;              /* open addressing: slot index + 1, 0 = empty */
    size_t index_cap;             /* power of two, > 2 * cap */
    struct fl_behaviour def;      /* the "default" object's fields */
    struct fl_behaviour def_base; /* baseline default */
    struct fl_counters total;
    uint64_t untracked; /* requests for models that did not fit */
    uint64_t seed;
    uint64_t spare_rng; /* draws for requests of models that did not fit */
};

static const struct fl_behaviour builtin = {
    .fail_rate = 0.0,
    .status = 500,
    .latency_ms = 0,
    .ttft_ms = 0,
    .retry_after_s = 0,
    .error = FL_FAULT_NONE,
    .prompt_tokens = 12,
    .completion_tokens = 8,
    .chunks = 4,
    .set = 0,
};

static const char *const fault_names[] = {NULL, "context_window", "content_policy", "garbage",
                                          "drop_mid_stream"};

const char *fl_fault_name(enum fl_fault f)
{
    if ((unsigned)f >= sizeof(fault_names) / sizeof(fault_names[0]))
        return NULL;
    return fault_names[f];
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct fl_table *fl_table_create(size_t capacity, uint64_t seed)
{
    struct fl_table *t = NULL;

    if (capacity == 0 || capacity > 65536)
        return NULL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        goto fail;
    t->slots = calloc(capacity, sizeof(*t->slots));
    t->index_cap = 16;
    while (t->index_cap < 2 * capacity + 1)
        t->index_cap *= 2;
    t->index = calloc(t->index_cap, sizeof(*t->index));
    if (t->slots == NULL || t->index == NULL)
        goto fail;
    t->cap = capacity;
    t->seed = seed;
    t->spare_rng = seed;
    pthread_mutex_init(&t->lock, NULL);
    return t;

fail:
    if (t != NULL) {
        free(t->slots);
        free(t->index);
    }
    free(t);
    return NULL;
}

void fl_table_destroy(struct fl_table **tp)
{
    struct fl_table *t;

    if (tp == NULL || *tp == NULL)
        return;
    t = *tp;
    *tp = NULL;
    pthread_mutex_destroy(&t->lock);
    free(t->slots);
    free(t->index);
    free(t);
}

/* Find or (create != 0) add the slot for name. Returns its index or -1. Lock held. */
static int slot_find(struct fl_table *t, const char *name, int create)
{
    size_t mask = t->index_cap - 1;
    size_t i = (size_t)tg_hash_fnv1a64_str(name) & mask;

    for (;;) {
        uint32_t v = t->index[i];
        if (v == 0)
            break;
        if (strcmp(t->slots[v - 1].name, name) == 0)
            return (int)(v - 1);
        i = (i + 1) & mask;
    }
    if (!create || t->len == t->cap)
        return -1;
    struct fl_slot *s = &t->slots[t->len];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->rng = t->seed ^ tg_hash_fnv1a64_str(name);
    t->index[i] = (uint32_t)(t->len + 1);
    return (int)t->len++;
}

static int get_u32(json_t *v, const char *key, uint32_t lo, uint32_t hi, uint32_t *out, char *err,
                   size_t errlen)
{
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "%s must be an integer", key);
        return TG_EINVAL;
    }
    json_int_t n = json_integer_value(v);
    if (n < (json_int_t)lo || n > (json_int_t)hi) {
        snprintf(err, errlen, "%s must be within %u..%u", key, lo, hi);
        return TG_ERANGE;
    }
    *out = (uint32_t)n;
    return 0;
}

/* Parse obj's fields on top of *b (a copy; the caller commits on success). */
static int parse_fields(json_t *obj, struct fl_behaviour *b, char *err, size_t errlen)
{
    const char *key;
    json_t *v;
    int rc = 0;

    if (!json_is_object(obj)) {
        snprintf(err, errlen, "behaviour must be a JSON object");
        return TG_EINVAL;
    }
    json_object_foreach(obj, key, v)
    {
        unsigned bit;
        uint32_t u = 0;
        if (strcmp(key, "fail_rate") == 0)
            bit = FL_SET_FAIL_RATE;
        else if (strcmp(key, "status") == 0)
            bit = FL_SET_STATUS;
        else if (strcmp(key, "latency_ms") == 0)
            bit = FL_SET_LATENCY;
        else if (strcmp(key, "ttft_ms") == 0)
            bit = FL_SET_TTFT;
        else if (strcmp(key, "retry_after") == 0)
            bit = FL_SET_RETRY_AFTER;
        else if (strcmp(key, "error") == 0)
            bit = FL_SET_ERROR;
        else if (strcmp(key, "prompt_tokens") == 0)
            bit = FL_SET_PROMPT_TOKENS;
        else if (strcmp(key, "completion_tokens") == 0)
            bit = FL_SET_COMPLETION_TOKENS;
        else if (strcmp(key, "chunks") == 0)
            bit = FL_SET_CHUNKS;
        else if (strcmp(key, "cached_tokens") == 0)
            bit = FL_SET_CACHED_TOKENS;
        else if (strcmp(key, "cache_creation_tokens") == 0)
            bit = FL_SET_CACHE_CREATION_TOKENS;
        else if (strcmp(key, "reasoning_tokens") == 0)
            bit = FL_SET_REASONING_TOKENS;
        else {
            snprintf(err, errlen, "unknown field \"%.64s\"", key);
            return TG_EINVAL;
        }
        if (json_is_null(v)) {
            b->set &= ~bit;
            continue;
        }
        switch (bit) {
        case FL_SET_FAIL_RATE:
            if (!json_is_number(v) || !(json_number_value(v) >= 0.0) ||
                json_number_value(v) > 1.0) {
                snprintf(err, errlen, "fail_rate must be a number within 0..1");
                return TG_ERANGE;
            }
            b->fail_rate = json_number_value(v);
            break;
        case FL_SET_STATUS:
            rc = get_u32(v, key, 200, 599, &u, err, errlen);
            b->status = (int)u;
            break;
        case FL_SET_LATENCY:
            rc = get_u32(v, key, 0, FL_LATENCY_MAX_MS, &b->latency_ms, err, errlen);
            break;
        case FL_SET_TTFT:
            rc = get_u32(v, key, 0, FL_LATENCY_MAX_MS, &b->ttft_ms, err, errlen);
            break;
        case FL_SET_RETRY_AFTER:
            rc = get_u32(v, key, 0, FL_RETRY_AFTER_MAX_S, &b->retry_after_s, err, errlen);
            break;
        case FL_SET_PROMPT_TOKENS:
            rc = get_u32(v, key, 0, FL_TOKENS_MAX, &b->prompt_tokens, err, errlen);
            break;
        case FL_SET_COMPLETION_TOKENS:
            rc = get_u32(v, key, 0, FL_TOKENS_MAX, &b->completion_tokens, err, errlen);
            break;
        case FL_SET_CHUNKS:
            rc = get_u32(v, key, 1, FL_CHUNKS_MAX, &b->chunks, err, errlen);
            break;
        case FL_SET_CACHED_TOKENS:
            rc = get_u32(v, key, 0, FL_TOKENS_MAX, &b->cached_tokens, err, errlen);
            break;
        case FL_SET_CACHE_CREATION_TOKENS:
            rc = get_u32(v, key, 0, FL_TOKENS_MAX, &b->cache_creation_tokens, err, errlen);
            break;
        case FL_SET_REASONING_TOKENS:
            rc = get_u32(v, key, 0, FL_TOKENS_MAX, &b->reasoning_tokens, err, errlen);
            break;
        case FL_SET_ERROR: {
            const char *s = json_string_value(v);
            int found = -1;
            for (int f = 1; s != NULL && f <= FL_FAULT_DROP_MID_STREAM; f++)
                if (strcmp(s, fault_names[f]) == 0)
                    found = f;
            if (s != NULL && strcmp(s, "none") == 0)
                found = FL_FAULT_NONE;
            if (found < 0) {
                snprintf(err, errlen,
                         "error must be null, \"none\", \"context_window\", \"content_policy\", "
                         "\"garbage\" or \"drop_mid_stream\"");
                return TG_EINVAL;
            }
            b->error = (enum fl_fault)found;
            break;
        }
        default:
            break;
        }
        if (rc != 0)
            return rc;
        b->set |= bit;
    }
    return 0;
}

int fl_table_merge(struct fl_table *t, const char *name, json_t *obj, char *err, size_t errlen)
{
    int rc = 0;
    struct fl_behaviour b;

    if (name != NULL && (name[0] == '\0' || strlen(name) > FL_MODEL_NAME_MAX)) {
        snprintf(err, errlen, "model name must be 1..%d bytes", FL_MODEL_NAME_MAX);
        return TG_EINVAL;
    }
    pthread_mutex_lock(&t->lock);
    if (name == NULL) {
        b = t->def;
        rc = parse_fields(obj, &b, err, errlen);
        if (rc == 0)
            t->def = b;
        goto out;
    }
    int slot = slot_find(t, name, 0);
    b = slot >= 0 ? t->slots[slot].cfg : builtin;
    if (slot < 0)
        b.set = 0;
    rc = parse_fields(obj, &b, err, errlen);
    if (rc != 0)
        goto out;
    if (slot < 0)
        slot = slot_find(t, name, 1);
    if (slot < 0) {
        snprintf(err, errlen, "model table is full (%zu models)", t->cap);
        rc = TG_EFULL;
        goto out;
    }
    t->slots[slot].cfg = b;
out:
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int fl_table_load(struct fl_table *t, json_t *config, char *err, size_t errlen)
{
    const char *key;
    json_t *v;
    int rc;

    if (!json_is_object(config)) {
        snprintf(err, errlen, "config must be a JSON object");
        return TG_EINVAL;
    }
    json_object_foreach(config, key, v)
    {
        if (strcmp(key, "default") != 0 && strcmp(key, "models") != 0) {
            snprintf(err, errlen, "config: unknown key \"%.64s\"", key);
            return TG_EINVAL;
        }
    }
    v = json_object_get(config, "default");
    if (v != NULL && !json_is_null(v)) {
        rc = fl_table_merge(t, NULL, v, err, errlen);
        if (rc != 0)
            return rc;
    }
    json_t *models = json_object_get(config, "models");
    if (models != NULL && !json_is_null(models)) {
        if (!json_is_object(models)) {
            snprintf(err, errlen, "config: models must be an object");
            return TG_EINVAL;
        }
        json_object_foreach(models, key, v)
        {
            char sub[200];
            rc = fl_table_merge(t, key, v, sub, sizeof(sub));
            if (rc != 0) {
                snprintf(err, errlen, "config: model \"%.64s\": %s", key, sub);
                return rc;
            }
        }
    }
    pthread_mutex_lock(&t->lock);
    t->def_base = t->def;
    for (size_t i = 0; i < t->len; i++)
        t->slots[i].base = t->slots[i].cfg;
    pthread_mutex_unlock(&t->lock);
    return 0;
}

/* Effective behaviour: built-in, then default's set fields, then the model's. */
static void overlay(struct fl_behaviour *dst, const struct fl_behaviour *src)
{
    if (src->set & FL_SET_FAIL_RATE)
        dst->fail_rate = src->fail_rate;
    if (src->set & FL_SET_STATUS)
        dst->status = src->status;
    if (src->set & FL_SET_LATENCY)
        dst->latency_ms = src->latency_ms;
    if (src->set & FL_SET_TTFT)
        dst->ttft_ms = src->ttft_ms;
    if (src->set & FL_SET_RETRY_AFTER)
        dst->retry_after_s = src->retry_after_s;
    if (src->set & FL_SET_ERROR)
        dst->error = src->error;
    if (src->set & FL_SET_PROMPT_TOKENS)
        dst->prompt_tokens = src->prompt_tokens;
    if (src->set & FL_SET_COMPLETION_TOKENS)
        dst->completion_tokens = src->completion_tokens;
    if (src->set & FL_SET_CHUNKS)
        dst->chunks = src->chunks;
    if (src->set & FL_SET_CACHED_TOKENS)
        dst->cached_tokens = src->cached_tokens;
    if (src->set & FL_SET_CACHE_CREATION_TOKENS)
        dst->cache_creation_tokens = src->cache_creation_tokens;
    if (src->set & FL_SET_REASONING_TOKENS)
        dst->reasoning_tokens = src->reasoning_tokens;
    dst->set |= src->set;
}

static double fail_probability(const struct fl_behaviour *b)
{
    if (b->set & FL_SET_FAIL_RATE)
        return b->fail_rate;
    if (((b->set & FL_SET_STATUS) && (b->status < 200 || b->status > 299)) ||
        b->error != FL_FAULT_NONE)
        return 1.0;
    return 0.0;
}

void fl_table_decide(struct fl_table *t, const char *name, int stream, struct fl_decision *out)
{
    struct fl_behaviour b = builtin;
    double p;

    pthread_mutex_lock(&t->lock);
    overlay(&b, &t->def);
    int slot = slot_find(t, name, 1);
    uint64_t draw = 0;
    if (slot >= 0) {
        struct fl_slot *s = &t->slots[slot];
        overlay(&b, &s->cfg);
        draw = splitmix64(&s->rng);
        s->c.requests++;
        if (stream)
            s->c.streams++;
    } else {
        t->untracked++;
        draw = splitmix64(&t->spare_rng);
    }
    t->total.requests++;
    if (stream)
        t->total.streams++;
    pthread_mutex_unlock(&t->lock);

    p = fail_probability(&b);
    out->b = b;
    out->slot = slot;
    if (p >= 1.0)
        out->fail = 1;
    else if (p <= 0.0)
        out->fail = 0;
    else
        out->fail = ((double)(draw >> 11) * 0x1.0p-53) < p;
}

void fl_table_count_unnamed(struct fl_table *t, int stream)
{
    pthread_mutex_lock(&t->lock);
    t->total.requests++;
    if (stream)
        t->total.streams++;
    pthread_mutex_unlock(&t->lock);
}

static void bump(struct fl_counters *c, enum fl_count what)
{
    switch (what) {
    case FL_COUNT_OK:
        c->ok++;
        break;
    case FL_COUNT_FAILED:
        c->failed++;
        break;
    case FL_COUNT_ABORTED:
        c->aborted++;
        break;
    }
}

void fl_table_count(struct fl_table *t, int slot, enum fl_count what)
{
    pthread_mutex_lock(&t->lock);
    if (slot >= 0 && (size_t)slot < t->len)
        bump(&t->slots[slot].c, what);
    bump(&t->total, what);
    pthread_mutex_unlock(&t->lock);
}

static json_t *counters_json(const struct fl_counters *c)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "requests", (json_int_t)c->requests, "ok",
                     (json_int_t)c->ok, "failed", (json_int_t)c->failed, "streams",
                     (json_int_t)c->streams, "aborted", (json_int_t)c->aborted);
}

json_t *fl_table_stats(struct fl_table *t)
{
    json_t *root = NULL;
    json_t *models = json_object();

    if (models == NULL)
        return NULL;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->len; i++) {
        if (json_object_set_new(models, t->slots[i].name, counters_json(&t->slots[i].c)) != 0)
            goto out;
    }
    root = json_pack("{s:O, s:o, s:I}", "models", models, "total", counters_json(&t->total),
                     "untracked", (json_int_t)t->untracked);
out:
    pthread_mutex_unlock(&t->lock);
    json_decref(models);
    return root;
}

static json_t *behaviour_json(const struct fl_behaviour *b)
{
    const char *e = fl_fault_name(b->error);
    return json_pack("{s:f, s:i, s:I, s:I, s:I, s:s?, s:I, s:I, s:I, s:f}", "fail_rate",
                     b->fail_rate, "status", b->status, "latency_ms", (json_int_t)b->latency_ms,
                     "ttft_ms", (json_int_t)b->ttft_ms, "retry_after", (json_int_t)b->retry_after_s,
                     "error", e, "prompt_tokens", (json_int_t)b->prompt_tokens, "completion_tokens",
                     (json_int_t)b->completion_tokens, "chunks", (json_int_t)b->chunks,
                     "effective_fail_probability", fail_probability(b));
}

json_t *fl_table_describe(struct fl_table *t)
{
    json_t *root = json_object();
    struct fl_behaviour b;

    if (root == NULL)
        return NULL;
    pthread_mutex_lock(&t->lock);
    b = builtin;
    overlay(&b, &t->def);
    json_object_set_new(root, "default", behaviour_json(&b));
    json_t *models = json_object();
    for (size_t i = 0; models != NULL && i < t->len; i++) {
        b = builtin;
        overlay(&b, &t->def);
        overlay(&b, &t->slots[i].cfg);
        json_object_set_new(models, t->slots[i].name, behaviour_json(&b));
    }
    json_object_set_new(root, "models", models);
    pthread_mutex_unlock(&t->lock);
    return root;
}

json_t *fl_table_names(struct fl_table *t)
{
    json_t *arr = json_array();

    if (arr == NULL)
        return NULL;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->len; i++)
        json_array_append_new(arr, json_string(t->slots[i].name));
    pthread_mutex_unlock(&t->lock);
    return arr;
}

void fl_table_reset(struct fl_table *t, int restore_config)
{
    pthread_mutex_lock(&t->lock);
    memset(&t->total, 0, sizeof(t->total));
    t->untracked = 0;
    t->spare_rng = t->seed;
    if (restore_config)
        t->def = t->def_base;
    for (size_t i = 0; i < t->len; i++) {
        struct fl_slot *s = &t->slots[i];
        memset(&s->c, 0, sizeof(s->c));
        s->rng = t->seed ^ tg_hash_fnv1a64_str(s->name);
        if (restore_config)
            s->cfg = s->base;
    }
    pthread_mutex_unlock(&t->lock);
}
