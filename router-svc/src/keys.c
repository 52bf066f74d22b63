#include "keys.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "key_extra.h"
#include "proto_control.h"
#include "tg_err.h"
#include "tg_log.h"
#include "tg_units.h"

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
        k->admin_blocked = s->admin_blocked;
    }
    {
        const char *alias = bump_str(b, s->key_alias);
        const char *team = bump_str(b, s->team_id);
        const char *user = bump_str(b, s->user_id);
        const char *extra = bump_str(b, s->extra);

        if (r != NULL) {
            r->key.key_alias = alias;
            r->key.team_id = team;
            r->key.user_id = user;
            r->key.extra = extra;
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

/* 1 when each of the 8 bytes of v is a lowercase hex digit: per byte, with its high bit clear
 * (no carry between bytes then), x + (0x80 - lo) has its high bit set when x >= lo, and
 * x + (0x7f - hi) when x > hi. */
static inline int hex8(uint64_t v)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t digit, af;

    if ((v & highs) != 0)
        return 0;
    digit = (v + ones * (0x80 - '0')) & ~(v + ones * (0x7f - '9'));
    af = (v + ones * (0x80 - 'a')) & ~(v + ones * (0x7f - 'f'));
    return ((digit | af) & highs) == highs;
}

/* 64 lowercase hex digits and the end: on every request (the credential's digest), eight bytes
 * a step once the length is known (never read past a shorter string's end). */
static int hash_valid(const char *h)
{
    if (strnlen(h, TG_SHA256_HEX_LEN + 1) != TG_SHA256_HEX_LEN)
        return 0;
    for (int i = 0; i < TG_SHA256_HEX_LEN; i += 8) {
        uint64_t v;

        memcpy(&v, h + i, sizeof(v));
        if (!hex8(v))
            return 0;
    }
    return 1;
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
        !str_ok(s->extra, sizeof(s->extra)) ||
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
static void key_to_spec(const struct rt_key *k, struct rt_key_spec *s)
{
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
    s->admin_blocked = k->admin_blocked;
    snprintf(s->extra, sizeof(s->extra), "%s", k->extra);
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
            key_to_spec(&old->key, scratch);
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

/* The key of a hash known to be well-formed (table not NULL). */
static const struct rt_key *lookup_valid(const struct rt_keys_table *table, const char *hash)
{
    struct slot *s;
    int found;

    s = slot_find(table->slots, table->n_slots, hash, &found);
    if (!found || !s->rec->present)
        return NULL;
    return &s->rec->key;
}

const struct rt_key *rt_keys_lookup_hash(const struct rt_keys_table *table, const char *hash)
{
    if (table == NULL || hash == NULL || !hash_valid(hash))
        return NULL;
    return lookup_valid(table, hash);
}

const struct rt_key *rt_keys_lookup(const struct rt_keys_table *table, const char *token,
                                    size_t len)
{
    char hex[TG_SHA256_HEX_LEN + 1];

    if (table == NULL || token == NULL || len == 0)
        return NULL;
    tg_sha256_hex(token, len, hex); /* 64 lowercase hex digits: no check needed */
    return lookup_valid(table, hex);
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

int rt_keys_foreach(const struct rt_keys_table *table,
                    int (*fn)(const struct rt_key *key, int present, void *arg), void *arg)
{
    for (size_t i = 0; i < table->n_slots; i++) {
        const struct rec *r = table->slots[i].rec;
        int rc;

        if (r == NULL)
            continue;
        rc = fn(&r->key, r->present, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
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

/* ---- JSON ---- */

/* Field paths quote input names: cut silently when an input name is absurdly long. */
static void fpath(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fpath(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}

void rt_key_spec_init(struct rt_key_spec *spec)
{
    memset(spec, 0, sizeof(*spec));
    spec->max_budget_nusd = RT_LIMIT_NONE;
    spec->rpm_limit = RT_LIMIT_NONE;
    spec->tpm_limit = RT_LIMIT_NONE;
    spec->max_parallel_requests = RT_LIMIT_NONE;
    spec->num_retries = -1;
}

void rt_key_get_spec(const struct rt_key *key, struct rt_key_spec *spec)
{
    key_to_spec(key, spec);
}

struct jctx {
    const struct rt_config *cfg;
    char *err;
    size_t errlen;
    json_t *extra;     /* stored-only fields of the body (key_extra.h), NULL when none */
    int extra_replace; /* 1: the stored form's "extra": the whole set, not a change */
    int tags_from;     /* the body's tags came as 1: metadata.tags, 2: tags */
    int aliases_from;  /* the aliases came as 1: router_settings.model_group_alias, 2: aliases */
};


static int jfail(struct jctx *j, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int jfail(struct jctx *j, const char *field, const char *fmt, ...)
{
    char problem[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(problem, sizeof(problem), fmt, ap);
    va_end(ap);
    snprintf(j->err, j->errlen, "%s: %s", field, problem);
    return TG_EINVAL;
}

/* A list given two ways in one body (LiteLLM's top-level name and Tollgate's nested one). */
static int j_once(struct jctx *j, int *from, int way, const char *field, const char *other)
{
    if (*from != 0 && *from != way)
        return jfail(j, field, "also given as %s: give the list one way", other);
    *from = way;
    return 0;
}

static int j_str(struct jctx *j, const json_t *v, const char *field, char *dst, size_t cap,
                 int allow_null)
{
    size_t n;

    if (json_is_null(v) && allow_null) {
        dst[0] = '\0';
        return 0;
    }
    if (!json_is_string(v))
        return jfail(j, field, "expected a string");
    n = json_string_length(v);
    if (n >= cap)
        return jfail(j, field, "too long (%zu bytes, max %zu)", n, cap - 1);
    if (memchr(json_string_value(v), '\0', n) != NULL)
        return jfail(j, field, "contains a NUL byte");
    memcpy(dst, json_string_value(v), n + 1);
    return 0;
}

/* A model group or alias name that must exist (when a config is given). */
/* A model name: a non-empty string of at most RT_NAME_CAP - 1 bytes. */
static int j_name(struct jctx *j, const json_t *v, const char *field, char *dst)
{
    if (j_str(j, v, field, dst, RT_NAME_CAP, 0) != 0)
        return TG_EINVAL;
    if (dst[0] == '\0')
        return jfail(j, field, "expected a non-empty string");
    return 0;
}

/* 1 when name is a model group or a global alias of cfg (NULL: anything goes). */
static int j_known(const struct rt_config *cfg, const char *name)
{
    if (cfg == NULL || rt_config_has_group(cfg, name))
        return 1;
    for (uint32_t i = 0; i < cfg->n_aliases; i++) {
        if (strcmp(cfg->aliases[i].alias, name) == 0)
            return 1;
    }
    return 0;
}

static int j_model(struct jctx *j, const json_t *v, const char *field, char *dst)
{
    if (j_name(j, v, field, dst) != 0)
        return TG_EINVAL;
    if (!j_known(j->cfg, dst))
        return jfail(j, field, "unknown model group or alias \"%s\"", dst);
    return 0;
}

static int j_limit(struct jctx *j, const json_t *v, const char *field, int64_t *out)
{
    if (json_is_null(v)) {
        *out = RT_LIMIT_NONE;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return jfail(j, field, "expected a non-negative integer or null");
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int j_bool(struct jctx *j, const json_t *v, const char *field, int *out)
{
    if (json_is_null(v)) {
        *out = 0;
        return 0;
    }
    if (!json_is_boolean(v))
        return jfail(j, field, "expected true or false");
    *out = json_is_true(v);
    return 0;
}

static int j_model_limits(struct jctx *j, const json_t *v, const char *field, struct rt_key_spec *s,
                          int is_tpm)
{
    const char *g;
    json_t *n;
    char f[300];

    for (uint32_t i = 0; i < s->n_model_limits; i++) {
        if (is_tpm)
            s->model_limits[i].tpm = RT_LIMIT_NONE;
        else
            s->model_limits[i].rpm = RT_LIMIT_NONE;
    }
    if (json_is_null(v))
        goto compact;
    if (!json_is_object(v))
        return jfail(j, field, "expected an object {model_group: limit}");
    json_object_foreach((json_t *)v, g, n)
    {
        struct rt_key_model_limit *l = NULL;
        char name[RT_NAME_CAP];
        json_t *gs = json_string(g);
        int rc;
        int64_t val = 0;

        fpath(f, sizeof(f), "%s.%s", field, g);
        rc = gs == NULL ? TG_ENOMEM : j_model(j, gs, f, name);
        json_decref(gs);
        if (rc != 0)
            return rc == TG_ENOMEM ? jfail(j, f, "out of memory") : rc;
        if (j_limit(j, n, f, &val) != 0)
            return TG_EINVAL;
        for (uint32_t i = 0; i < s->n_model_limits; i++) {
            if (strcmp(s->model_limits[i].group, name) == 0)
                l = &s->model_limits[i];
        }
        if (l == NULL) {
            if (s->n_model_limits >= RT_KEY_MODEL_LIMITS_MAX)
                return jfail(j, field, "too many model groups (max %d)", RT_KEY_MODEL_LIMITS_MAX);
            l = &s->model_limits[s->n_model_limits++];
            snprintf(l->group, sizeof(l->group), "%s", name);
            l->rpm = RT_LIMIT_NONE;
            l->tpm = RT_LIMIT_NONE;
        }
        if (is_tpm)
            l->tpm = val;
        else
            l->rpm = val;
    }
compact:
    /* Drop groups left without any limit. */
    {
        uint32_t w = 0;

        for (uint32_t i = 0; i < s->n_model_limits; i++) {
            if (s->model_limits[i].rpm < 0 && s->model_limits[i].tpm < 0)
                continue;
            if (w != i)
                s->model_limits[w] = s->model_limits[i];
            w++;
        }
        s->n_model_limits = w;
    }
    return 0;
}

static int j_fallbacks(struct jctx *j, const json_t *v, const char *field, struct rt_key_spec *s)
{
    size_t i;
    json_t *item;
    char f[300];

    s->n_fallbacks = 0;
    if (json_is_null(v)) {
        s->has_fallbacks = 0;
        return 0;
    }
    if (!json_is_array(v))
        return jfail(j, field, "expected a list like [{\"group\": [\"fallback\"]}] or null");
    s->has_fallbacks = 1;
    json_array_foreach((json_t *)v, i, item)
    {
        const char *g;
        json_t *targets;

        fpath(f, sizeof(f), "%s[%zu]", field, i);
        if (!json_is_object(item))
            return jfail(j, f, "expected an object {group: [fallbacks]}");
        json_object_foreach(item, g, targets)
        {
            struct rt_fallback_rule *r;
            json_t *gs;
            size_t t;
            json_t *tv;
            char tf[340];
            int rc;

            if (s->n_fallbacks >= RT_KEY_FALLBACK_RULES_MAX)
                return jfail(j, field, "too many rules (max %d)", RT_KEY_FALLBACK_RULES_MAX);
            r = &s->fallbacks[s->n_fallbacks];
            memset(r, 0, sizeof(*r));
            fpath(tf, sizeof(tf), "%s.%s", f, g);
            gs = json_string(g);
            rc = gs == NULL ? TG_EINVAL : j_model(j, gs, tf, r->group);
            json_decref(gs);
            if (rc != 0)
                return TG_EINVAL;
            if (!json_is_array(targets))
                return jfail(j, tf, "expected a list of model groups");
            if (json_array_size(targets) > RT_FALLBACK_TARGETS_MAX)
                return jfail(j, tf, "too many fallbacks (max %d)", RT_FALLBACK_TARGETS_MAX);
            json_array_foreach(targets, t, tv)
            {
                char ef[360];

                fpath(ef, sizeof(ef), "%s[%zu]", tf, t);
                if (j_model(j, tv, ef, r->targets[r->n_targets]) != 0)
                    return TG_EINVAL;
                r->n_targets++;
            }
            s->n_fallbacks++;
        }
    }
    return 0;
}

static int j_aliases(struct jctx *j, const json_t *v, const char *field, struct rt_key_spec *s)
{
    const char *a;
    json_t *g;
    char f[300];

    s->n_aliases = 0;
    if (json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return jfail(j, field, "expected an object {alias: model_group}");
    json_object_foreach((json_t *)v, a, g)
    {
        struct rt_alias_rule *r;

        fpath(f, sizeof(f), "%s.%s", field, a);
        if (s->n_aliases >= RT_KEY_ALIASES_MAX)
            return jfail(j, field, "too many aliases (max %d)", RT_KEY_ALIASES_MAX);
        r = &s->aliases[s->n_aliases];
        memset(r, 0, sizeof(*r));
        if (a[0] == '\0' || strlen(a) >= sizeof(r->alias))
            return jfail(j, f, "alias must be 1..%d bytes", RT_NAME_CAP - 1);
        snprintf(r->alias, sizeof(r->alias), "%s", a);
        if (json_is_object(g))
            g = json_object_get(g, "model"); /* LiteLLM's {model: group, hidden: bool} form */
        if (j_model(j, g, f, r->group) != 0)
            return TG_EINVAL;
        if (j->cfg != NULL && !rt_config_has_group(j->cfg, r->group))
            return jfail(j, f, "unknown model group \"%s\"", r->group);
        s->n_aliases++;
    }
    return 0;
}

/* A key's tags (metadata.tags; LiteLLM's top-level tags, which LiteLLM keeps there too). */
static int j_tags(struct jctx *j, json_t *v, const char *field, struct rt_key_spec *s)
{
    size_t i;
    json_t *t;
    char f[300];

    s->n_tags = 0;
    if (json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return jfail(j, field, "expected a list of strings");
    if (json_array_size(v) > RT_KEY_TAGS_MAX)
        return jfail(j, field, "too many tags (max %d)", RT_KEY_TAGS_MAX);
    json_array_foreach(v, i, t)
    {
        fpath(f, sizeof(f), "%s[%zu]", field, i);
        if (j_str(j, t, f, s->tags[s->n_tags], RT_TAG_CAP, 0) != 0)
            return TG_EINVAL;
        s->n_tags++;
    }
    return 0;
}

static int j_field(struct jctx *j, struct rt_key_spec *s, enum rt_key_json_form form, const char *k,
                   json_t *v)
{
    char f[300];

    if (strcmp(k, "key_alias") == 0)
        return j_str(j, v, k, s->key_alias, sizeof(s->key_alias), 1);
    if (strcmp(k, "team_id") == 0)
        return j_str(j, v, k, s->team_id, sizeof(s->team_id), 1);
    if (strcmp(k, "user_id") == 0)
        return j_str(j, v, k, s->user_id, sizeof(s->user_id), 1);
    if (strcmp(k, "models") == 0) {
        size_t i;
        json_t *m;

        s->n_models = 0;
        if (json_is_null(v))
            return 0;
        if (!json_is_array(v))
            return jfail(j, k, "expected a list of model groups");
        if (json_array_size(v) > RT_KEY_MODELS_MAX)
            return jfail(j, k, "too many models (max %d)", RT_KEY_MODELS_MAX);
        json_array_foreach(v, i, m)
        {
            fpath(f, sizeof(f), "models[%zu]", i);
            /* known names are checked once the whole body is read (the key's own aliases) */
            if (j_name(j, m, f, s->models[s->n_models]) != 0)
                return TG_EINVAL;
            s->n_models++;
        }
        return 0;
    }
    if (strcmp(k, "rpm_limit") == 0)
        return j_limit(j, v, k, &s->rpm_limit);
    if (strcmp(k, "tpm_limit") == 0)
        return j_limit(j, v, k, &s->tpm_limit);
    if (strcmp(k, "max_parallel_requests") == 0)
        return j_limit(j, v, k, &s->max_parallel_requests);
    if (strcmp(k, "model_rpm_limit") == 0)
        return j_model_limits(j, v, k, s, 0);
    if (strcmp(k, "model_tpm_limit") == 0)
        return j_model_limits(j, v, k, s, 1);
    if (strcmp(k, "metadata") == 0) {
        const char *mk;
        json_t *mv;

        if (json_is_null(v)) {
            s->disable_fallbacks = 0;
            s->n_tags = 0;
            return 0;
        }
        if (!json_is_object(v))
            return jfail(j, k, "expected an object");
        json_object_foreach(v, mk, mv)
        {
            if (strcmp(mk, "disable_fallbacks") == 0) {
                if (j_bool(j, mv, "metadata.disable_fallbacks", &s->disable_fallbacks) != 0)
                    return TG_EINVAL;
            } else if (strcmp(mk, "tags") == 0) {
                if (j_once(j, &j->tags_from, 1, "metadata.tags", "tags") != 0 ||
                    j_tags(j, mv, "metadata.tags", s) != 0)
                    return TG_EINVAL;
            }
            /* Other metadata is the user's own and never enters the router. */
        }
        return 0;
    }
    if (strcmp(k, "router_settings") == 0) {
        const char *rk;
        json_t *rv;

        if (json_is_null(v)) {
            s->has_fallbacks = 0;
            s->n_fallbacks = 0;
            s->n_aliases = 0;
            s->num_retries = -1;
            return 0;
        }
        if (!json_is_object(v))
            return jfail(j, k, "expected an object");
        json_object_foreach(v, rk, rv)
        {
            int rc;

            fpath(f, sizeof(f), "router_settings.%s", rk);
            if (strcmp(rk, "fallbacks") == 0) {
                rc = j_fallbacks(j, rv, f, s);
            } else if (strcmp(rk, "model_group_alias") == 0) {
                rc = j_once(j, &j->aliases_from, 1, f, "aliases");
                if (rc == 0)
                    rc = j_aliases(j, rv, f, s);
            } else if (strcmp(rk, "num_retries") == 0) {
                int64_t n = 0;

                rc = j_limit(j, rv, f, &n);
                if (rc == 0 && n > 16)
                    rc = jfail(j, f, "at most 16");
                if (rc == 0)
                    s->num_retries = n < 0 ? -1 : (int32_t)n;
            } else {
                rc = jfail(j, f, "unknown field");
            }
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    if (form == RT_KEY_JSON_API) {
        if (strcmp(k, "max_budget") == 0) {
            char num[64];
            int64_t fusd = 0;

            if (json_is_null(v)) {
                s->max_budget_nusd = RT_LIMIT_NONE;
                return 0;
            }
            if (!json_is_number(v) || json_number_value(v) < 0)
                return jfail(j, k, "expected a non-negative number (USD) or null");
            snprintf(num, sizeof(num), "%.15g", json_number_value(v));
            if (tg_parse_usd_fusd(num, &fusd) != 0)
                return jfail(j, k, "out of range");
            s->max_budget_nusd = fusd / 1000000;
            return 0;
        }
        if (strcmp(k, "budget_duration") == 0) {
            if (json_is_null(v)) {
                s->budget_duration_s = 0;
                return 0;
            }
            if (!json_is_string(v) ||
                tg_parse_duration_s(json_string_value(v), &s->budget_duration_s) != 0)
                return jfail(j, k, "expected a duration like 30s, 10m, 1h, 7d or 1mo");
            return 0;
        }
        if (strcmp(k, "key") == 0 || strcmp(k, "duration") == 0 || strcmp(k, "key_hash") == 0)
            return 0; /* the caller's */
        if (strcmp(k, "blocked") == 0) { /* LiteLLM's: an admin's block */
            if (json_is_null(v)) {
                s->admin_blocked = 0;
                return 0;
            }
            return j_bool(j, v, k, &s->admin_blocked);
        }
        /* LiteLLM's names for two lists Tollgate keeps under its own (README "Virtual keys") */
        if (strcmp(k, "tags") == 0)
            return j_once(j, &j->tags_from, 2, k, "metadata.tags") != 0 ? TG_EINVAL
                                                                        : j_tags(j, v, k, s);
        if (strcmp(k, "aliases") == 0)
            return j_once(j, &j->aliases_from, 2, k, "router_settings.model_group_alias") != 0
                       ? TG_EINVAL
                       : j_aliases(j, v, k, s);
        if (rt_extra_is_field(&rt_key_extra, k))
            return rt_extra_note(&rt_key_extra, &j->extra, k, v, j->err, j->errlen);
    } else {
        if (strcmp(k, "key_hash") == 0) {
            if (!json_is_string(v) || json_string_length(v) != TG_SHA256_HEX_LEN ||
                !hash_valid(json_string_value(v)))
                return jfail(j, k, "expected 64 lowercase hex characters");
            memcpy(s->key_hash, json_string_value(v), TG_SHA256_HEX_LEN + 1);
            return 0;
        }
        if (strcmp(k, "max_budget_nusd") == 0)
            return j_limit(j, v, k, &s->max_budget_nusd);
        if (strcmp(k, "budget_duration_s") == 0 || strcmp(k, "expires_epoch_ms") == 0) {
            int64_t n = 0;

            if (j_limit(j, v, k, &n) != 0)
                return TG_EINVAL;
            if (strcmp(k, "budget_duration_s") == 0)
                s->budget_duration_s = n < 0 ? 0 : n;
            else
                s->expires_epoch_ms = n < 0 ? 0 : n;
            return 0;
        }
        if (strcmp(k, "blocked") == 0)
            return j_bool(j, v, k, &s->blocked);
        if (strcmp(k, "admin_blocked") == 0)
            return j_bool(j, v, k, &s->admin_blocked);
        if (strcmp(k, "extra") == 0) {
            j->extra_replace = 1;
            return rt_extra_note_stored(&rt_key_extra, &j->extra, v, j->err, j->errlen);
        }
    }
    return jfail(j, k, "unknown field");
}

int rt_key_spec_from_json(struct rt_key_spec *spec, enum rt_key_json_form form, const char *json,
                          size_t len, const struct rt_config *cfg, char *err, size_t errlen)
{
    json_t *root;
    json_error_t jerr;
    struct jctx j = {cfg, err, errlen, NULL, 0, 0, 0};
    const char *k;
    json_t *v;
    int rc = 0;
    int check_models = 0;

    if (json == NULL || len == 0)
        return jfail(&j, "body", "expected a JSON object");
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return jfail(&j, "body", "invalid JSON at line %d column %d", jerr.line, jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return jfail(&j, "body", "expected a JSON object");
    }
    json_object_foreach(root, k, v)
    {
        rc = j_field(&j, spec, form, k, v);
        if (rc != 0)
            break;
        check_models |= strcmp(k, "models") == 0 || strcmp(k, "router_settings") == 0 ||
                        strcmp(k, "aliases") == 0;
    }
    json_decref(root);
    if (rc == 0 && (j.extra != NULL || j.extra_replace))
        rc = rt_extra_apply(&rt_key_extra, spec->extra, sizeof(spec->extra), j.extra,
                            j.extra_replace, err, errlen);
    json_decref(j.extra);
    /* models may name a group, a global alias or one of the key's own aliases, in the merged
     * spec (an update that drops an alias still listed in models is refused); checked when the
     * body touched either */
    for (uint32_t i = 0; rc == 0 && check_models && i < spec->n_models; i++) {
        int own = 0;

        for (uint32_t a = 0; a < spec->n_aliases; a++)
            own |= strcmp(spec->aliases[a].alias, spec->models[i]) == 0;
        if (!own && !j_known(cfg, spec->models[i])) {
            char f[32];

            snprintf(f, sizeof(f), "models[%u]", i);
            rc = jfail(&j, f, "unknown model group or alias \"%s\"", spec->models[i]);
        }
    }
    return rc;
}

static json_t *j_limit_value(int64_t v)
{
    return v < 0 ? json_null() : json_integer(v);
}

int rt_key_spec_to_json(const struct rt_key_spec *s, char *out, size_t cap, size_t *outlen)
{
    json_t *o = json_object();
    json_t *models = json_array(), *mrpm = json_object(), *mtpm = json_object();
    json_t *meta = json_object(), *tags = json_array(), *rs = json_object();
    json_t *aliases = json_object();
    size_t need;
    int rc = TG_ENOMEM;

    if (o == NULL || models == NULL || mrpm == NULL || mtpm == NULL || meta == NULL ||
        tags == NULL || rs == NULL || aliases == NULL)
        goto out;
    json_object_set_new(o, "key_hash", json_string(s->key_hash));
    json_object_set_new(o, "key_alias", json_string(s->key_alias));
    json_object_set_new(o, "team_id", json_string(s->team_id));
    json_object_set_new(o, "user_id", json_string(s->user_id));
    for (uint32_t i = 0; i < s->n_models; i++)
        json_array_append_new(models, json_string(s->models[i]));
    json_object_set(o, "models", models);
    json_object_set_new(o, "max_budget_nusd", j_limit_value(s->max_budget_nusd));
    json_object_set_new(o, "budget_duration_s", json_integer(s->budget_duration_s));
    json_object_set_new(o, "rpm_limit", j_limit_value(s->rpm_limit));
    json_object_set_new(o, "tpm_limit", j_limit_value(s->tpm_limit));
    json_object_set_new(o, "max_parallel_requests", j_limit_value(s->max_parallel_requests));
    /* By group name: the order of model_limits depends on the order the two objects came in,
     * and the stored form of a spec must not (decode then encode gives back the same bytes). */
    {
        uint32_t order[RT_KEY_MODEL_LIMITS_MAX];
        uint32_t n = s->n_model_limits < RT_KEY_MODEL_LIMITS_MAX ? s->n_model_limits
                                                                 : RT_KEY_MODEL_LIMITS_MAX;

        for (uint32_t i = 0; i < n; i++) {
            uint32_t j = i;

            while (j > 0 &&
                   strcmp(s->model_limits[order[j - 1]].group, s->model_limits[i].group) > 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        for (uint32_t i = 0; i < n; i++) {
            const struct rt_key_model_limit *l = &s->model_limits[order[i]];

            if (l->rpm >= 0)
                json_object_set_new(mrpm, l->group, json_integer(l->rpm));
            if (l->tpm >= 0)
                json_object_set_new(mtpm, l->group, json_integer(l->tpm));
        }
    }
    json_object_set(o, "model_rpm_limit", mrpm);
    json_object_set(o, "model_tpm_limit", mtpm);
    json_object_set_new(meta, "disable_fallbacks", json_boolean(s->disable_fallbacks));
    for (uint32_t i = 0; i < s->n_tags; i++)
        json_array_append_new(tags, json_string(s->tags[i]));
    json_object_set(meta, "tags", tags);
    json_object_set(o, "metadata", meta);
    if (s->has_fallbacks) {
        json_t *fb = json_array();

        for (uint32_t i = 0; fb != NULL && i < s->n_fallbacks; i++) {
            json_t *rule = json_object(), *t = json_array();

            for (uint32_t k = 0; t != NULL && k < s->fallbacks[i].n_targets; k++)
                json_array_append_new(t, json_string(s->fallbacks[i].targets[k]));
            json_object_set_new(rule, s->fallbacks[i].group, t);
            json_array_append_new(fb, rule);
        }
        json_object_set_new(rs, "fallbacks", fb);
    } else {
        json_object_set_new(rs, "fallbacks", json_null());
    }
    for (uint32_t i = 0; i < s->n_aliases; i++)
        json_object_set_new(aliases, s->aliases[i].alias, json_string(s->aliases[i].group));
    json_object_set(rs, "model_group_alias", aliases);
    json_object_set_new(rs, "num_retries",
                        s->num_retries < 0 ? json_null() : json_integer(s->num_retries));
    json_object_set(o, "router_settings", rs);
    json_object_set_new(o, "expires_epoch_ms", json_integer(s->expires_epoch_ms));
    json_object_set_new(o, "blocked", json_boolean(s->blocked));
    if (s->admin_blocked)
        json_object_set_new(o, "admin_blocked", json_true());
    if (s->extra[0] != '\0') {
        json_t *extra = rt_extra_object(s->extra);

        if (extra == NULL) {
            rc = TG_EINVAL; /* not from rt_key_spec_from_json */
            goto out;
        }
        json_object_set_new(o, "extra", extra);
    }
    /* the extra fields' numbers as extra_fields.c wrote them (the rest are integers) */
    need = json_dumpb(o, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    if (need == 0)
        goto out;
    if (need + 1 > cap) {
        rc = TG_ETOOBIG;
        goto out;
    }
    if (json_dumpb(o, out, cap, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) !=
        need)
        goto out;
    out[need] = '\0';
    *outlen = need;
    rc = 0;
out:
    json_decref(aliases);
    json_decref(rs);
    json_decref(tags);
    json_decref(meta);
    json_decref(mtpm);
    json_decref(mrpm);
    json_decref(models);
    json_decref(o);
    return rc;
}

int rt_keys_control_decode(const char *rkey, size_t rklen, const char *value, size_t len,
                           const struct rt_config *cfg, struct rt_key_change *change,
                           struct rt_key_spec *spec, char *err, size_t errlen)
{
    enum proto_ctl_kind kind;
    int is_block, rc;

    memset(change, 0, sizeof(*change));
    rc = proto_ctl_parse_key(rkey, rklen, &kind, change->hash, err, errlen);
    if (rc != 0)
        return rc;
    is_block = kind == PROTO_CTL_BLOCK;
    if (is_block) {
        change->op = value != NULL ? RT_KEY_BLOCK : RT_KEY_UNBLOCK;
        return 0;
    }
    if (value == NULL) {
        change->op = RT_KEY_DELETE;
        return 0;
    }
    rt_key_spec_init(spec);
    if (rt_key_spec_from_json(spec, RT_KEY_JSON_STORED, value, len, cfg, err, errlen) != 0)
        return TG_EINVAL;
    if (strcmp(spec->key_hash, change->hash) != 0) {
        snprintf(err, errlen, "key_hash: does not match the record key");
        return TG_EINVAL;
    }
    change->op = RT_KEY_PUT;
    change->spec = spec;
    return 0;
}
