#include "keys.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_err.h"
#include "tg_log.h"

/* A record: reference counted (one reference per snapshot holding it), immutable once built.
 * Everything the public struct rt_key points to lives in the same allocation, after it. A
 * "mark only" record (present = 0) carries a block mark for a hash without a key. */
struct rec {
    _Atomic uint32_t refs;
    int present; /* 0: block mark only, never returned by lookups */
    size_t size; /* bytes of the allocation */
    struct rt_key key;
};

struct slot {
    uint64_t h64;    /* first 16 hex digits of the hash, 0 = empty slot */
    struct rec *rec; /* NULL = empty */
};

struct rt_keys_table {
    _Atomic uint32_t refs;
    size_t n_slots; /* power of two */
    struct slot *slots;
    size_t n_records; /* present records */
    size_t n_marks;   /* entries with a block mark (present or not) */
    size_t n_entries; /* all entries */
};

struct rt_keys {
    pthread_mutex_t swap_lock;   /* held only to load+ref or swap `current` */
    pthread_mutex_t writer_lock; /* serialises rt_keys_apply */
    struct rt_keys_table *current;
    size_t max_keys;
    _Atomic uint64_t generation;
    _Atomic uint64_t full_rejections;
};

/* ---- records ---- */

struct bump {
    char *base; /* NULL while measuring */
    size_t off;
};

static void *bump_alloc(struct bump *b, size_t n, size_t align)
{
    void *p;

    b->off = (b->off + align - 1) & ~(align - 1);
    p = b->base != NULL ? b->base + b->off : NULL;
    b->off += n;
    return p;
}

static const char *bump_str(struct bump *b, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = bump_alloc(b, n, 1);

    if (p == NULL)
        return "";
    memcpy(p, s, n);
    return p;
}

static const char **bump_ptrs(struct bump *b, size_t n)
{
    return bump_alloc(b, n * sizeof(char *), _Alignof(char *));
}

/* Lay the record out in b (measure when b->base is NULL). */
static void rec_layout(struct bump *b, const struct rt_key_spec *s, int present)
{
    struct rec *r = bump_alloc(b, sizeof(struct rec), _Alignof(struct rec));
    const char **models = bump_ptrs(b, s->n_models);
    const char **tags = bump_ptrs(b, s->n_tags);
    struct rt_key_group_limit *limits =
        bump_alloc(b, s->n_model_limits * sizeof(*limits), _Alignof(struct rt_key_group_limit));
    struct rt_key_fallback *fbs =
        bump_alloc(b, s->n_fallbacks * sizeof(*fbs), _Alignof(struct rt_key_fallback));
    struct rt_key_alias *aliases =
        bump_alloc(b, s->n_aliases * sizeof(*aliases), _Alignof(struct rt_key_alias));
    const char **targets[RT_KEY_FALLBACK_RULES_MAX];

    for (uint32_t i = 0; i < s->n_fallbacks; i++)
        targets[i] = bump_ptrs(b, s->fallbacks[i].n_targets);
    if (r != NULL) {
        struct rt_key *k = &r->key;

        atomic_init(&r->refs, 1);
        r->present = present;
        memcpy(k->hash, s->key_hash, sizeof(k->hash));
        k->n_models = s->n_models;
        k->models = models;
        k->max_budget_nusd = s->max_budget_nusd;
        k->budget_duration_s = s->budget_duration_s;
        k->rpm_limit = s->rpm_limit;
        k->tpm_limit = s->tpm_limit;
        k->max_parallel_requests = s->max_parallel_requests;
        k->n_group_limits = s->n_model_limits;
        k->group_limits = limits;
        k->disable_fallbacks = s->disable_fallbacks;
        k->n_tags = s->n_tags;
        k->tags = tags;
        k->has_fallbacks = s->has_fallbacks;
        k->n_fallbacks = s->n_fallbacks;
        k->fallbacks = fbs;
        k->n_aliases = s->n_aliases;
        k->aliases = aliases;
        k->num_retries = s->num_retries;
        k->expires_epoch_ms = s->expires_epoch_ms;
        k->blocked = s->blocked;
    }
    {
        const char *alias = bump_str(b, s->key_alias);
        const char *team = bump_str(b, s->team_id);
        const char *user = bump_str(b, s->user_id);

        if (r != NULL) {
            r->key.key_alias = alias;
            r->key.team_id = team;
            r->key.user_id = user;
        }
    }
    for (uint32_t i = 0; i < s->n_models; i++) {
        const char *m = bump_str(b, s->models[i]);

        if (models != NULL)
            models[i] = m;
    }
    for (uint32_t i = 0; i < s->n_tags; i++) {
        const char *t = bump_str(b, s->tags[i]);

        if (tags != NULL)
            tags[i] = t;
    }
    for (uint32_t i = 0; i < s->n_model_limits; i++) {
        const char *g = bump_str(b, s->model_limits[i].group);

        if (limits != NULL) {
            limits[i].group = g;
            limits[i].rpm = s->model_limits[i].rpm;
            limits[i].tpm = s->model_limits[i].tpm;
        }
    }
    for (uint32_t i = 0; i < s->n_fallbacks; i++) {
        const char *g = bump_str(b, s->fallbacks[i].group);

        for (uint32_t j = 0; j < s->fallbacks[i].n_targets; j++) {
            const char *t = bump_str(b, s->fallbacks[i].targets[j]);

            if (targets[i] != NULL)
                targets[i][j] = t;
        }
        if (fbs != NULL) {
            fbs[i].group = g;
            fbs[i].n_targets = s->fallbacks[i].n_targets;
            fbs[i].targets = targets[i];
        }
    }
    for (uint32_t i = 0; i < s->n_aliases; i++) {
        const char *a = bump_str(b, s->aliases[i].alias);
        const char *g = bump_str(b, s->aliases[i].group);

        if (aliases != NULL) {
            aliases[i].alias = a;
            aliases[i].group = g;
        }
    }
}

static int hash_valid(const char *h)
{
    for (int i = 0; i < TG_SHA256_HEX_LEN; i++) {
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    }
    return h[TG_SHA256_HEX_LEN] == '\0';
}

static int str_ok(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

/* The spec's strings are terminated within their fields and counts within their arrays. */
static int spec_valid(const struct rt_key_spec *s)
{
    if (!hash_valid(s->key_hash) || !str_ok(s->key_alias, RT_ID_CAP) ||
        !str_ok(s->team_id, RT_ID_CAP) || !str_ok(s->user_id, RT_ID_CAP) ||
        s->n_models > RT_KEY_MODELS_MAX || s->n_model_limits > RT_KEY_MODEL_LIMITS_MAX ||
        s->n_tags > RT_KEY_TAGS_MAX || s->n_fallbacks > RT_KEY_FALLBACK_RULES_MAX ||
        s->n_aliases > RT_KEY_ALIASES_MAX)
        return 0;
    for (uint32_t i = 0; i < s->n_models; i++) {
        if (!str_ok(s->models[i], RT_NAME_CAP))
            return 0;
    }
    for (uint32_t i = 0; i < s->n_tags; i++) {
        if (!str_ok(s->tags[i], RT_TAG_CAP))
            return 0;
    }
    for (uint32_t i = 0; i < s->n_model_limits; i++) {
        if (!str_ok(s->model_limits[i].group, RT_NAME_CAP))
            return 0;
    }
    for (uint32_t i = 0; i < s->n_fallbacks; i++) {
        if (!str_ok(s->fallbacks[i].group, RT_NAME_CAP) ||
            s->fallbacks[i].n_targets > RT_FALLBACK_TARGETS_MAX)
            return 0;
        for (uint32_t j = 0; j < s->fallbacks[i].n_targets; j++) {
            if (!str_ok(s->fallbacks[i].targets[j], RT_NAME_CAP))
                return 0;
        }
    }
    for (uint32_t i = 0; i < s->n_aliases; i++) {
        if (!str_ok(s->aliases[i].alias, RT_NAME_CAP) || !str_ok(s->aliases[i].group, RT_NAME_CAP))
            return 0;
    }
    return 1;
}

/* New record (refs = 1) from a spec, or NULL (out of memory). */
static struct rec *rec_new(const struct rt_key_spec *s, int present)
{
    struct bump b = {NULL, 0};
    struct rec *r;

    rec_layout(&b, s, present);
    b.base = calloc(1, b.off);
    if (b.base == NULL)
        return NULL;
    r = (struct rec *)b.base;
    r->size = b.off;
    b.off = 0;
    rec_layout(&b, s, present);
    return r;
}

/* The spec a record was built from (for re-building it with a different block mark). */
static void rec_to_spec(const struct rec *r, struct rt_key_spec *s)
{
    const struct rt_key *k = &r->key;

    memset(s, 0, sizeof(*s));
    memcpy(s->key_hash, k->hash, sizeof(s->key_hash));
    snprintf(s->key_alias, sizeof(s->key_alias), "%s", k->key_alias);
    snprintf(s->team_id, sizeof(s->team_id), "%s", k->team_id);
    snprintf(s->user_id, sizeof(s->user_id), "%s", k->user_id);
    s->n_models = k->n_models;
    for (uint32_t i = 0; i < k->n_models; i++)
        snprintf(s->models[i], RT_NAME_CAP, "%s", k->models[i]);
    s->max_budget_nusd = k->max_budget_nusd;
    s->budget_duration_s = k->budget_duration_s;
    s->rpm_limit = k->rpm_limit;
    s->tpm_limit = k->tpm_limit;
    s->max_parallel_requests = k->max_parallel_requests;
    s->n_model_limits = k->n_group_limits;
    for (uint32_t i = 0; i < k->n_group_limits; i++) {
        snprintf(s->model_limits[i].group, RT_NAME_CAP, "%s", k->group_limits[i].group);
        s->model_limits[i].rpm = k->group_limits[i].rpm;
        s->model_limits[i].tpm = k->group_limits[i].tpm;
    }
    s->disable_fallbacks = k->disable_fallbacks;
    s->n_tags = k->n_tags;
    for (uint32_t i = 0; i < k->n_tags; i++)
        snprintf(s->tags[i], RT_TAG_CAP, "%s", k->tags[i]);
    s->has_fallbacks = k->has_fallbacks;
    s->n_fallbacks = k->n_fallbacks;
    for (uint32_t i = 0; i < k->n_fallbacks; i++) {
        snprintf(s->fallbacks[i].group, RT_NAME_CAP, "%s", k->fallbacks[i].group);
        s->fallbacks[i].n_targets = k->fallbacks[i].n_targets;
        for (uint32_t j = 0; j < k->fallbacks[i].n_targets; j++)
            snprintf(s->fallbacks[i].targets[j], RT_NAME_CAP, "%s", k->fallbacks[i].targets[j]);
    }
    s->n_aliases = k->n_aliases;
    for (uint32_t i = 0; i < k->n_aliases; i++) {
        snprintf(s->aliases[i].alias, RT_NAME_CAP, "%s", k->aliases[i].alias);
        snprintf(s->aliases[i].group, RT_NAME_CAP, "%s", k->aliases[i].group);
    }
    s->num_retries = k->num_retries;
    s->expires_epoch_ms = k->expires_epoch_ms;
    s->blocked = k->blocked;
}

static void rec_unref(struct rec *r)
{
    if (r == NULL)
        return;
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
        memset(r, 0, r->size);
        free(r);
    }
}

static void rec_ref(struct rec *r)
{
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

/* ---- hash index ---- */

static uint64_t h64_of(const char *hash)
{
    uint64_t v = 0;

    for (int i = 0; i < 16; i++) {
        char c = hash[i];

        v = (v << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return v == 0 ? 1 : v; /* 0 marks an empty slot */
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;

    while (p < n)
        p <<= 1;
    return p;
}

static struct slot *slot_find(struct slot *slots, size_t n_slots, const char *hash, int *found)
{
    uint64_t h = h64_of(hash);
    size_t mask = n_slots - 1;

    for (size_t i = 0; i < n_slots; i++) {
        struct slot *s = &slots[(h + i) & mask];

        if (s->rec == NULL) {
            *found = 0;
            return s;
        }
        if (s->h64 == h && memcmp(s->rec->key.hash, hash, TG_SHA256_HEX_LEN) == 0) {
            *found = 1;
            return s;
        }
    }
    *found = 0;
    return NULL;
}

static void table_free(struct rt_keys_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n_slots; i++)
        rec_unref(t->slots[i].rec);
    free(t->slots);
    free(t);
}

void rt_keys_release(struct rt_keys_table **table)
{
    if (table == NULL || *table == NULL)
        return;
    if (atomic_fetch_sub_explicit(&(*table)->refs, 1, memory_order_acq_rel) == 1)
        table_free(*table);
    *table = NULL;
}

/* A working set of entries while a change batch is applied: open addressing, grown never (sized
 * for the current entries plus the batch). */
struct work {
    size_t n_slots;
    struct slot *slots;
    unsigned char *fresh; /* 1: the slot's rec was created by this batch (owned by the work) */
    unsigned char *gone;  /* 1: deleted in this batch (tombstone) */
};

static int work_init(struct work *w, const struct rt_keys_table *cur, size_t n_changes)
{
    memset(w, 0, sizeof(*w));
    w->n_slots = pow2_at_least(2 * ((cur != NULL ? cur->n_entries : 0) + n_changes) + 1);
    w->slots = calloc(w->n_slots, sizeof(*w->slots));
    w->fresh = calloc(w->n_slots, 1);
    w->gone = calloc(w->n_slots, 1);
    if (w->slots == NULL || w->fresh == NULL || w->gone == NULL)
        return TG_ENOMEM;
    if (cur != NULL) {
        for (size_t i = 0; i < cur->n_slots; i++) {
            int found;
            struct slot *s;

            if (cur->slots[i].rec == NULL)
                continue;
            s = slot_find(w->slots, w->n_slots, cur->slots[i].rec->key.hash, &found);
            *s = cur->slots[i]; /* borrowed from cur until the new table takes references */
        }
    }
    return 0;
}

static void work_fini(struct work *w, int free_fresh)
{
    if (w->slots != NULL && free_fresh) {
        for (size_t i = 0; i < w->n_slots; i++) {
            if (w->fresh[i])
                rec_unref(w->slots[i].rec);
        }
    }
    free(w->slots);
    free(w->fresh);
    free(w->gone);
}

/* Put rec (fresh, owned) at hash's place, dropping a fresh record it replaces. */
static void work_put(struct work *w, const char *hash, struct rec *rec)
{
    int found;
    struct slot *s = slot_find(w->slots, w->n_slots, hash, &found);
    size_t i = (size_t)(s - w->slots);

    if (found && w->fresh[i])
        rec_unref(s->rec);
    s->h64 = h64_of(hash);
    s->rec = rec;
    w->fresh[i] = 1;
    w->gone[i] = 0;
}

static struct rec *work_get(struct work *w, const char *hash, size_t *idx)
{
    int found;
    struct slot *s = slot_find(w->slots, w->n_slots, hash, &found);

    if (!found)
        return NULL;
    *idx = (size_t)(s - w->slots);
    return w->gone[*idx] ? NULL : s->rec;
}

static int apply_one(struct work *w, const struct rt_key_change *c, struct rt_key_spec *scratch)
{
    struct rec *old, *r;
    size_t idx = 0;
    const char *hash = c->op == RT_KEY_PUT && c->spec != NULL ? c->spec->key_hash : c->hash;

    if (!hash_valid(hash))
        return TG_EINVAL;
    old = work_get(w, hash, &idx);
    switch (c->op) {
    case RT_KEY_PUT:
        if (c->spec == NULL || !spec_valid(c->spec))
            return TG_EINVAL;
        *scratch = *c->spec;
        /* A block mark survives a PUT (the budget block is not lifted by a key update). */
        scratch->blocked = c->spec->blocked || (old != NULL && old->key.blocked);
        r = rec_new(scratch, 1);
        if (r == NULL)
            return TG_ENOMEM;
        work_put(w, hash, r);
        return 0;
    case RT_KEY_DELETE:
        if (old != NULL) {
            if (w->fresh[idx])
                rec_unref(old);
            w->fresh[idx] = 0;
            w->gone[idx] = 1;
        }
        return 0;
    case RT_KEY_BLOCK:
    case RT_KEY_UNBLOCK: {
        int want = c->op == RT_KEY_BLOCK;

        if (old == NULL) {
            if (!want)
                return 0;
            memset(scratch, 0, sizeof(*scratch));
            memcpy(scratch->key_hash, hash, sizeof(scratch->key_hash));
            scratch->blocked = 1;
            r = rec_new(scratch, 0);
        } else {
            if (old->key.blocked == want)
                return 0;
            if (!old->present) {
                /* Unblocking a mark-only entry removes it. */
                if (w->fresh[idx])
                    rec_unref(old);
                w->fresh[idx] = 0;
                w->gone[idx] = 1;
                return 0;
            }
            rec_to_spec(old, scratch);
            scratch->blocked = want;
            r = rec_new(scratch, 1);
        }
        if (r == NULL)
            return TG_ENOMEM;
        work_put(w, hash, r);
        return 0;
    }
    }
    return TG_EINVAL;
}

/* Build a published table from the work set; references are taken on kept records and fresh
 * ones are handed over. Returns NULL on out of memory (work untouched). */
static struct rt_keys_table *table_from_work(struct work *w, size_t max_keys, int *rc)
{
    struct rt_keys_table *t;
    size_t live = 0;

    for (size_t i = 0; i < w->n_slots; i++) {
        if (w->slots[i].rec != NULL && !w->gone[i])
            live++;
    }
    if (live > max_keys) {
        *rc = TG_EFULL;
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        goto nomem;
    t->n_slots = pow2_at_least(2 * live + 1);
    t->slots = calloc(t->n_slots, sizeof(*t->slots));
    if (t->slots == NULL)
        goto nomem;
    atomic_init(&t->refs, 1);
    for (size_t i = 0; i < w->n_slots; i++) {
        struct rec *r = w->slots[i].rec;
        struct slot *s;
        int found;

        if (r == NULL || w->gone[i])
            continue;
        s = slot_find(t->slots, t->n_slots, r->key.hash, &found);
        s->h64 = w->slots[i].h64;
        s->rec = r;
        if (w->fresh[i])
            w->fresh[i] = 0; /* handed over */
        else
            rec_ref(r);
        t->n_entries++;
        t->n_records += (size_t)r->present;
        t->n_marks += (size_t)(r->key.blocked != 0);
    }
    *rc = 0;
    return t;
nomem:
    if (t != NULL)
        free(t->slots);
    free(t);
    *rc = TG_ENOMEM;
    return NULL;
}

/* Apply to cur (may be NULL) and return the new table, or NULL with *rc. */
static struct rt_keys_table *build(const struct rt_keys_table *cur, const struct rt_key_change *ch,
                                   size_t n, size_t max_keys, int *rc)
{
    struct work w;
    struct rt_key_spec *scratch = NULL;
    struct rt_keys_table *t = NULL;

    *rc = work_init(&w, cur, n);
    if (*rc != 0)
        goto out;
    scratch = malloc(sizeof(*scratch));
    if (scratch == NULL) {
        *rc = TG_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        *rc = apply_one(&w, &ch[i], scratch);
        if (*rc != 0)
            goto out;
    }
    t = table_from_work(&w, max_keys, rc);
out:
    work_fini(&w, 1);
    free(scratch);
    return t;
}

struct rt_keys *rt_keys_create(const struct rt_key_spec *specs, size_t n, size_t max_keys,
                               char *err, size_t errlen)
{
    struct rt_keys *keys = NULL;
    struct rt_key_change *ch = NULL;
    int rc;

    if (max_keys == 0 || n > max_keys) {
        snprintf(err, errlen, "%zu static keys for a table of %zu", n, max_keys);
        return NULL;
    }
    keys = calloc(1, sizeof(*keys));
    if (keys == NULL)
        goto nomem;
    pthread_mutex_init(&keys->swap_lock, NULL);
    pthread_mutex_init(&keys->writer_lock, NULL);
    keys->max_keys = max_keys;
    if (n > 0) {
        ch = calloc(n, sizeof(*ch));
        if (ch == NULL)
            goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(specs[i].key_hash, specs[j].key_hash) == 0) {
                snprintf(err, errlen, "static keys %zu and %zu have the same value", j, i);
                goto fail;
            }
        }
        ch[i].op = RT_KEY_PUT;
        ch[i].spec = &specs[i];
    }
    keys->current = build(NULL, ch, n, max_keys, &rc);
    if (keys->current == NULL) {
        snprintf(err, errlen, "cannot build the keys table: %s", tg_strerror(rc));
        goto fail;
    }
    atomic_store(&keys->generation, 1);
    free(ch);
    return keys;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    free(ch);
    rt_keys_destroy(&keys);
    return NULL;
}

void rt_keys_destroy(struct rt_keys **keys)
{
    struct rt_keys *k;

    if (keys == NULL || *keys == NULL)
        return;
    k = *keys;
    rt_keys_release(&k->current);
    pthread_mutex_destroy(&k->swap_lock);
    pthread_mutex_destroy(&k->writer_lock);
    free(k);
    *keys = NULL;
}

struct rt_keys_table *rt_keys_acquire(struct rt_keys *keys)
{
    struct rt_keys_table *t;

    pthread_mutex_lock(&keys->swap_lock);
    t = keys->current;
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&keys->swap_lock);
    return t;
}

int rt_keys_apply(struct rt_keys *keys, const struct rt_key_change *changes, size_t n)
{
    struct rt_keys_table *t, *old;
    int rc;

    if (n == 0)
        return 0;
    if (changes == NULL)
        return TG_EINVAL;
    pthread_mutex_lock(&keys->writer_lock);
    /* current cannot change while the writer lock is held: no extra reference needed. */
    t = build(keys->current, changes, n, keys->max_keys, &rc);
    if (t == NULL) {
        pthread_mutex_unlock(&keys->writer_lock);
        if (rc == TG_EFULL) {
            atomic_fetch_add(&keys->full_rejections, 1);
            TG_WARN_RL("msg=\"keys table full, change refused\" capacity=%zu", keys->max_keys);
        }
        return rc;
    }
    pthread_mutex_lock(&keys->swap_lock);
    old = keys->current;
    keys->current = t;
    pthread_mutex_unlock(&keys->swap_lock);
    atomic_fetch_add(&keys->generation, 1);
    pthread_mutex_unlock(&keys->writer_lock);
    rt_keys_release(&old);
    return 0;
}

const struct rt_key *rt_keys_lookup_hash(const struct rt_keys_table *table, const char *hash)
{
    struct slot *s;
    int found;

    if (table == NULL || hash == NULL || !hash_valid(hash))
        return NULL;
    s = slot_find(table->slots, table->n_slots, hash, &found);
    if (!found || !s->rec->present)
        return NULL;
    return &s->rec->key;
}

const struct rt_key *rt_keys_lookup(const struct rt_keys_table *table, const char *token,
                                    size_t len)
{
    char hex[TG_SHA256_HEX_LEN + 1];

    if (token == NULL || len == 0)
        return NULL;
    tg_sha256_hex(token, len, hex);
    return rt_keys_lookup_hash(table, hex);
}

int rt_keys_is_blocked_hash(const struct rt_keys_table *table, const char *hash)
{
    struct slot *s;
    int found;

    if (table == NULL || hash == NULL || !hash_valid(hash))
        return 0;
    s = slot_find(table->slots, table->n_slots, hash, &found);
    return found && s->rec->key.blocked;
}

size_t rt_keys_count(const struct rt_keys_table *table)
{
    return table->n_records;
}

void rt_keys_get_stats(struct rt_keys *keys, struct rt_keys_stats *out)
{
    struct rt_keys_table *t = rt_keys_acquire(keys);

    memset(out, 0, sizeof(*out));
    out->count = t->n_records;
    out->blocked = t->n_marks;
    out->capacity = keys->max_keys;
    out->generation = atomic_load(&keys->generation);
    out->full_rejections = atomic_load(&keys->full_rejections);
    rt_keys_release(&t);
}

int rt_key_allows(const struct rt_key *key, const char *name)
{
    if (key == NULL || key->n_models == 0)
        return 1;
    for (uint32_t i = 0; i < key->n_models; i++) {
        if (strcmp(key->models[i], name) == 0)
            return 1;
    }
    return 0;
}
