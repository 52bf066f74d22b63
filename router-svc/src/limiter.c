#include "limiter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tg_err.h"
#include "tg_hash.h"
#include "tg_log.h"

/* One second of a window. A bucket belongs to second `sec`; a bucket holding an older second
 * is stale and counts nothing. */
struct bucket {
    uint32_t sec;    /* whole seconds of the monotonic clock */
    uint32_t reqs;   /* requests admitted in that second */
    uint64_t tokens; /* tokens added in that second */
};

struct window {
    struct bucket b[RT_LIMITER_WINDOW_S];
};

/* What the other replicas counted for a subject, at the last import. */
struct remote {
    uint64_t reqs;
    uint64_t tokens;
    uint64_t in_flight;
};

struct dep_slot {
    int64_t rpm;
    int64_t tpm;
    struct window w;
    struct remote rm;
};

struct key_slot {
    int used;                         /* 1 once a subject was placed here (never emptied) */
    char hash[RT_LIMITER_SUBJECT_MAX + 1]; /* key hash, or a team's subject */
    char group[RT_NAME_CAP];          /* "" = the key itself */
    uint32_t last_sec;                /* last second something was counted */
    uint32_t in_flight;               /* parallel requests held (key subjects only) */
    struct window w;
    struct remote rm;                 /* other replicas' counts (global mode) */
};

struct rt_limiter {
    uint32_t n_deps;
    struct dep_slot *deps;
    uint32_t cap;
    struct key_slot *keys;
    uint32_t now_sec;   /* latest second seen in any call: the reference for slot reuse */
    uint32_t sweep_pos; /* next slot the incremental sweep looks at */
    uint64_t now_ms;    /* latest time seen in any call (ms), for the import's age */
    int global;         /* rt_limiter_global_enable called */
    uint64_t stale_ms;  /* an import older than this: fallback */
    uint64_t last_import_ms; /* 0 = none yet */
    uint32_t replicas;  /* replicas seen at the last import, >= 1 */
    struct rt_limiter_stats stats;
};

static uint32_t sec_of(uint64_t now_ms)
{
    return (uint32_t)(now_ms / 1000u);
}

static int bucket_live(const struct bucket *b, uint32_t now_sec)
{
    return (b->reqs != 0 || b->tokens != 0) && b->sec <= now_sec &&
           now_sec - b->sec < RT_LIMITER_WINDOW_S;
}

static void window_sum(const struct window *w, uint32_t now_sec, uint64_t *reqs, uint64_t *tokens)
{
    uint64_t r = 0, t = 0;

    for (int i = 0; i < RT_LIMITER_WINDOW_S; i++) {
        if (bucket_live(&w->b[i], now_sec)) {
            r += w->b[i].reqs;
            t += w->b[i].tokens;
        }
    }
    *reqs = r;
    *tokens = t;
}

static void window_add(struct window *w, uint32_t now_sec, uint32_t reqs, uint64_t tokens)
{
    struct bucket *b = &w->b[now_sec % RT_LIMITER_WINDOW_S];

    if (b->sec != now_sec) {
        b->sec = now_sec;
        b->reqs = 0;
        b->tokens = 0;
    }
    b->reqs += reqs;
    b->tokens += tokens;
}

/* Whole seconds until at least `need` requests (use_tokens = 0) or tokens (1) have left the
 * window: the bucket of second s leaves at the start of second s + WINDOW. */
static uint32_t window_retry_after(const struct window *w, uint32_t now_sec, uint64_t need,
                                   int use_tokens)
{
    uint64_t gone = 0;

    for (uint32_t age = RT_LIMITER_WINDOW_S - 1;; age--) {
        uint32_t s;
        const struct bucket *b;

        if (age <= now_sec) {
            s = now_sec - age;
            b = &w->b[s % RT_LIMITER_WINDOW_S];
            if (b->sec == s && bucket_live(b, now_sec)) {
                gone += use_tokens ? b->tokens : b->reqs;
                if (gone >= need)
                    return RT_LIMITER_WINDOW_S - age;
            }
        }
        if (age == 0)
            break;
    }
    return RT_LIMITER_WINDOW_S; /* limit 0: nothing ever passes; a window is the honest wait */
}

/* global_fresh: the last import is recent enough to count the other replicas' admissions. */
static int global_fresh(const struct rt_limiter *lim)
{
    return lim->global && lim->last_import_ms != 0 &&
           lim->now_ms - lim->last_import_ms <= lim->stale_ms;
}

/* share: the part of limit n this replica may use. In fallback (global mode without a fresh
 * import) n / replicas, at least 1 unless n is 0; else n. RT_LIMIT_NONE stays. */
static int64_t share(const struct rt_limiter *lim, int64_t n)
{
    int64_t q;

    if (n <= 0 || !lim->global || global_fresh(lim) || lim->replicas <= 1)
        return n;
    q = n / (int64_t)lim->replicas;
    return q > 0 ? q : 1;
}

/* retry_wait: whole seconds until `need` of the counted units have left: the local buckets'
 * exact wait when they alone hold enough, else the remote part taken as spread evenly. */
static uint32_t retry_wait(const struct window *w, uint32_t now_sec, uint64_t need, uint64_t local,
                           uint64_t remote, int use_tokens)
{
    uint64_t s;

    if (w == NULL && remote == 0)
        return RT_LIMITER_WINDOW_S;
    if (w != NULL && need <= local)
        return window_retry_after(w, now_sec, need, use_tokens);
    if (remote == 0)
        return RT_LIMITER_WINDOW_S;
    s = (RT_LIMITER_WINDOW_S * (need - local) + remote - 1) / remote;
    return s < 1 ? 1 : s > RT_LIMITER_WINDOW_S ? RT_LIMITER_WINDOW_S : (uint32_t)s;
}

/* Shared check of one window (and the other replicas' counts rm, may be NULL) against rpm/tpm. */
static int window_check(struct rt_limiter *lim, const struct window *w, const struct remote *rm,
                        int64_t rpm, int64_t tpm, uint32_t now_sec, struct rt_limit_status *st)
{
    uint64_t reqs = 0, tokens = 0, rreqs = 0, rtokens = 0;
    int64_t erpm = share(lim, rpm), etpm = share(lim, tpm);
    struct rt_limit_status local;

    if (st == NULL)
        st = &local;
    if (rpm < 0 && tpm < 0)
        return 0;
    if (w != NULL)
        window_sum(w, now_sec, &reqs, &tokens);
    if (rm != NULL && global_fresh(lim)) {
        rreqs = rm->reqs;
        rtokens = rm->tokens;
    }
    if (erpm >= 0 && reqs + rreqs >= (uint64_t)erpm) {
        st->kind = RT_LIMIT_KIND_RPM;
        st->limit = rpm;
        st->remaining = 0;
        st->retry_after_s =
            retry_wait(w, now_sec, reqs + rreqs - (uint64_t)erpm + 1, reqs, rreqs, 0);
        lim->stats.limited++;
        return TG_ELIMIT;
    }
    if (etpm >= 0 && tokens + rtokens >= (uint64_t)etpm) {
        st->kind = RT_LIMIT_KIND_TPM;
        st->limit = tpm;
        st->remaining = 0;
        st->retry_after_s =
            retry_wait(w, now_sec, tokens + rtokens - (uint64_t)etpm + 1, tokens, rtokens, 1);
        lim->stats.limited++;
        return TG_ELIMIT;
    }
    return 0;
}

struct rt_limiter *rt_limiter_create(uint32_t n_deployments, uint32_t key_slots, char *err,
                                     size_t errlen)
{
    struct rt_limiter *lim = NULL;

    if (key_slots == 0) {
        snprintf(err, errlen, "limiter key slots must be >= 1");
        return NULL;
    }
    lim = calloc(1, sizeof(*lim));
    if (lim == NULL)
        goto nomem;
    lim->n_deps = n_deployments;
    if (n_deployments > 0) {
        lim->deps = calloc(n_deployments, sizeof(*lim->deps));
        if (lim->deps == NULL)
            goto nomem;
    }
    for (uint32_t i = 0; i < n_deployments; i++) {
        lim->deps[i].rpm = RT_LIMIT_NONE;
        lim->deps[i].tpm = RT_LIMIT_NONE;
    }
    lim->cap = key_slots;
    lim->keys = calloc(key_slots, sizeof(*lim->keys));
    if (lim->keys == NULL)
        goto nomem;
    lim->stats.slots_cap = key_slots;
    return lim;
nomem:
    snprintf(err, errlen, "out of memory for the limiter");
    rt_limiter_destroy(&lim);
    return NULL;
}

void rt_limiter_destroy(struct rt_limiter **lim)
{
    if (lim == NULL || *lim == NULL)
        return;
    free((*lim)->deps);
    free((*lim)->keys);
    free(*lim);
    *lim = NULL;
}

/* The second a call at now_ms counts in: the latest second seen by any call. Callers read the
 * clock before they take the router's lock, so a call can arrive with a time older than one
 * already counted; taken as is, the newer admission would sit in a "future" bucket that the
 * older time does not see, and a limit of N would admit N + 1. The limiter's clock therefore
 * never goes back: an older time is the latest second (at most the lock wait later). */
static uint32_t see_time(struct rt_limiter *lim, uint64_t now_ms)
{
    uint32_t s = sec_of(now_ms);

    if (now_ms > lim->now_ms)
        lim->now_ms = now_ms;
    if (s > lim->now_sec)
        lim->now_sec = s;
    return lim->now_sec;
}

int rt_limiter_set_deployment(struct rt_limiter *lim, uint32_t idx, int64_t rpm, int64_t tpm)
{
    if (idx >= lim->n_deps)
        return TG_EINVAL;
    lim->deps[idx].rpm = rpm < 0 ? RT_LIMIT_NONE : rpm;
    lim->deps[idx].tpm = tpm < 0 ? RT_LIMIT_NONE : tpm;
    return 0;
}

int rt_limiter_deployment_check(struct rt_limiter *lim, uint32_t idx, uint64_t now_ms,
                                struct rt_limit_status *st)
{
    if (idx >= lim->n_deps)
        return 0;
    return window_check(lim, &lim->deps[idx].w, &lim->deps[idx].rm, lim->deps[idx].rpm,
                        lim->deps[idx].tpm, see_time(lim, now_ms), st);
}

void rt_limiter_deployment_admit(struct rt_limiter *lim, uint32_t idx, uint64_t now_ms)
{
    if (idx >= lim->n_deps)
        return;
    window_add(&lim->deps[idx].w, see_time(lim, now_ms), 1, 0);
}

void rt_limiter_deployment_tokens(struct rt_limiter *lim, uint32_t idx, uint64_t tokens,
                                  uint64_t now_ms)
{
    if (idx >= lim->n_deps || tokens == 0)
        return;
    window_add(&lim->deps[idx].w, see_time(lim, now_ms), 0, tokens);
}

static uint64_t subject_hash(const char *hash, const char *group)
{
    static const unsigned char sep = 0xFF; /* between the two strings */
    uint64_t h = tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, hash, strlen(hash));

    h = tg_hash_fnv1a64(h, &sep, 1);
    return tg_hash_fnv1a64(h, group, strlen(group));
}

static int slot_stale(const struct rt_limiter *lim, const struct key_slot *k)
{
    return k->in_flight == 0 &&
           (k->last_sec > lim->now_sec || lim->now_sec - k->last_sec >= RT_LIMITER_WINDOW_S);
}

static uint32_t slot_home(const struct rt_limiter *lim, const struct key_slot *k)
{
    return (uint32_t)(subject_hash(k->hash, k->group) % lim->cap);
}

/* Empty slot i without breaking any probe chain (backward-shift deletion for linear probing):
 * every later slot of the run that may live closer to its home moves back into the hole. */
static void slot_delete(struct rt_limiter *lim, uint32_t i)
{
    uint32_t j = i;

    for (;;) {
        uint32_t h;
        int movable;

        j = (j + 1) % lim->cap;
        if (j == i || !lim->keys[j].used)
            break;
        h = slot_home(lim, &lim->keys[j]);
        /* keys[j] may move to i unless its home lies cyclically in (i, j] */
        if (i <= j)
            movable = h <= i || h > j;
        else
            movable = h <= i && h > j;
        if (movable) {
            lim->keys[i] = lim->keys[j];
            i = j;
        }
    }
    memset(&lim->keys[i], 0, sizeof(lim->keys[i]));
    lim->stats.slots_used--;
}

/* Free up to RT_LIMITER_SWEEP_SLOTS stale slots' worth of the table per call, from a rotating
 * position. Without it every slot, once used, stayed used: after cap distinct subjects had come
 * and gone, each lookup of an absent subject walked the whole table under the router's lock. A
 * constant amount of work per call keeps the chains as long as the live subjects make them. */
static void sweep_some(struct rt_limiter *lim)
{
    for (uint32_t n = 0; n < RT_LIMITER_SWEEP_SLOTS && n < lim->cap; n++) {
        uint32_t i = lim->sweep_pos % lim->cap;
        struct key_slot *k = &lim->keys[i];

        if (k->used && slot_stale(lim, k))
            slot_delete(lim, i); /* slot i may now hold a shifted subject: look again */
        else
            lim->sweep_pos = (i + 1) % lim->cap;
    }
}

/* The slot of (hash, group): found, or (insert) placed in an empty or stale slot. NULL when
 * absent (lookup) or no slot is free (insert). Linear probing; stale slots are emptied by
 * sweep_some with backward-shift deletion (chains stay whole); between sweeps a stale slot of
 * the chain is reused in place, only after the whole chain was searched for the subject. */
static struct key_slot *slot_get(struct rt_limiter *lim, const char *hash, const char *group,
                                 int insert)
{
    uint64_t h;
    struct key_slot *reuse = NULL;

    if (hash == NULL || strlen(hash) > RT_LIMITER_SUBJECT_MAX)
        return NULL;
    if (group == NULL)
        group = "";
    if (strlen(group) >= RT_NAME_CAP)
        return NULL;
    h = subject_hash(hash, group);
    for (uint32_t n = 0; n < lim->cap; n++) {
        struct key_slot *k = &lim->keys[(h + n) % lim->cap];

        lim->stats.probes++;
        if (!k->used) {
            if (reuse == NULL)
                reuse = k;
            break;
        }
        if (strcmp(k->hash, hash) == 0 && strcmp(k->group, group) == 0)
            return k;
        if (reuse == NULL && slot_stale(lim, k))
            reuse = k;
    }
    if (!insert || reuse == NULL)
        return NULL;
    if (!reuse->used)
        lim->stats.slots_used++;
    memset(reuse, 0, sizeof(*reuse));
    reuse->used = 1;
    strcpy(reuse->hash, hash);
    strcpy(reuse->group, group);
    reuse->last_sec = lim->now_sec;
    return reuse;
}

int rt_limiter_key_check(struct rt_limiter *lim, const char *key_hash, const char *group,
                         int64_t rpm, int64_t tpm, uint64_t now_ms, struct rt_limit_status *st)
{
    struct key_slot *k;
    uint32_t now_sec;

    if (rpm < 0 && tpm < 0)
        return 0;
    now_sec = see_time(lim, now_ms);
    sweep_some(lim);
    k = slot_get(lim, key_hash, group, 0);
    return window_check(lim, k == NULL ? NULL : &k->w, k == NULL ? NULL : &k->rm, rpm, tpm,
                        now_sec, st);
}

int rt_limiter_key_admit(struct rt_limiter *lim, const char *key_hash, const char *group,
                         uint64_t now_ms)
{
    struct key_slot *k;
    uint32_t now_sec = see_time(lim, now_ms);

    sweep_some(lim);
    k = slot_get(lim, key_hash, group, 1);
    if (k == NULL) {
        lim->stats.slots_full++;
        TG_WARN_RL("msg=\"limiter slots full, request admitted without its key limit\" cap=%u",
                   lim->cap);
        return TG_EFULL;
    }
    window_add(&k->w, now_sec, 1, 0);
    k->last_sec = now_sec;
    return 0;
}

void rt_limiter_key_tokens(struct rt_limiter *lim, const char *key_hash, const char *group,
                           uint64_t tokens, uint64_t now_ms)
{
    struct key_slot *k;
    uint32_t now_sec;

    if (tokens == 0)
        return;
    now_sec = see_time(lim, now_ms);
    sweep_some(lim);
    k = slot_get(lim, key_hash, group, 0);
    if (k == NULL)
        return;
    window_add(&k->w, now_sec, 0, tokens);
    k->last_sec = now_sec;
}

int rt_limiter_key_parallel_acquire(struct rt_limiter *lim, const char *key_hash, int64_t max,
                                    struct rt_limit_status *st)
{
    struct key_slot *k;

    if (max < 0)
        return TG_EFULL; /* nothing to hold: no limit */
    sweep_some(lim);
    k = slot_get(lim, key_hash, "", 1);
    if (k == NULL) {
        lim->stats.slots_full++;
        TG_WARN_RL("msg=\"limiter slots full, request admitted without max_parallel_requests\" "
                   "cap=%u",
                   lim->cap);
        return TG_EFULL;
    }
    if ((int64_t)k->in_flight + (int64_t)(global_fresh(lim) ? k->rm.in_flight : 0) >=
        share(lim, max)) {
        if (st != NULL) {
            st->kind = RT_LIMIT_KIND_PARALLEL;
            st->limit = max;
            st->remaining = 0;
            st->retry_after_s = 1;
        }
        lim->stats.limited++;
        return TG_ELIMIT;
    }
    k->in_flight++;
    k->last_sec = lim->now_sec;
    return 0;
}

void rt_limiter_key_parallel_release(struct rt_limiter *lim, const char *key_hash)
{
    struct key_slot *k = slot_get(lim, key_hash, "", 0);

    if (k != NULL && k->in_flight > 0) {
        k->in_flight--;
        k->last_sec = lim->now_sec;
    }
}

void rt_limiter_get_stats(const struct rt_limiter *lim, struct rt_limiter_stats *out)
{
    *out = lim->stats;
}

void rt_limiter_global_enable(struct rt_limiter *lim, uint64_t stale_ms)
{
    lim->global = 1;
    lim->stale_ms = stale_ms > 0 ? stale_ms : 1;
    if (lim->replicas == 0)
        lim->replicas = 1;
}

static void export_window(struct rt_limiter_sync_entry *e, const struct window *w,
                          uint32_t now_sec)
{
    window_sum(w, now_sec, &e->reqs, &e->tokens);
}

uint32_t rt_limiter_sync_export(struct rt_limiter *lim, uint64_t now_ms,
                                struct rt_limiter_sync_entry *out, uint32_t max,
                                uint32_t *cursor)
{
    uint32_t n = 0, now_sec = see_time(lim, now_ms);

    for (uint32_t i = 0; i < lim->n_deps && n < max; i++) {
        struct rt_limiter_sync_entry *e = &out[n];

        if (lim->deps[i].rpm < 0 && lim->deps[i].tpm < 0)
            continue;
        memset(e, 0, sizeof(*e));
        e->kind = RT_LIMITER_SUBJECT_DEPLOYMENT;
        e->idx = i;
        export_window(e, &lim->deps[i].w, now_sec);
        n++;
    }
    /* key slots from *cursor, once round the table at most */
    for (uint32_t seen = 0; seen < lim->cap && n < max; seen++) {
        uint32_t i = (*cursor + seen) % lim->cap;
        const struct key_slot *k = &lim->keys[i];
        struct rt_limiter_sync_entry *e = &out[n];

        /* a slot whose own window emptied still goes while it holds others' counts: the next
         * import refreshes them (they leave the others' windows too), else they would block
         * the subject until the slot is swept */
        if (!k->used ||
            (slot_stale(lim, k) && k->rm.reqs == 0 && k->rm.tokens == 0 && k->rm.in_flight == 0))
            continue;
        memset(e, 0, sizeof(*e));
        e->kind = k->group[0] == '\0' ? RT_LIMITER_SUBJECT_KEY : RT_LIMITER_SUBJECT_KEY_GROUP;
        memcpy(e->hash, k->hash, sizeof(e->hash));
        memcpy(e->group, k->group, sizeof(e->group));
        export_window(e, &k->w, now_sec);
        e->in_flight = k->in_flight;
        n++;
        if (n == max)
            *cursor = (i + 1) % lim->cap;
    }
    return n;
}

void rt_limiter_sync_import(struct rt_limiter *lim, const struct rt_limiter_sync_entry *in,
                            uint32_t n, uint32_t replicas_seen, uint64_t now_ms)
{
    see_time(lim, now_ms);
    for (uint32_t i = 0; i < n; i++) {
        const struct rt_limiter_sync_entry *e = &in[i];
        struct remote *rm = NULL;

        if (e->kind == RT_LIMITER_SUBJECT_DEPLOYMENT) {
            if (e->idx < lim->n_deps)
                rm = &lim->deps[e->idx].rm;
        } else {
            struct key_slot *k = slot_get(lim, e->hash, e->group, 0);

            if (k != NULL)
                rm = &k->rm;
        }
        if (rm == NULL)
            continue;
        rm->reqs = e->remote_reqs;
        rm->tokens = e->remote_tokens;
        rm->in_flight = e->remote_in_flight;
    }
    lim->replicas = replicas_seen > 0 ? replicas_seen : 1;
    lim->last_import_ms = now_ms > 0 ? now_ms : 1;
}

void rt_limiter_global_get(struct rt_limiter *lim, uint64_t now_ms,
                           struct rt_limiter_global_state *out)
{
    see_time(lim, now_ms);
    out->enabled = lim->global;
    out->fallback = lim->global && !global_fresh(lim);
    out->replicas_seen = lim->replicas > 0 ? lim->replicas : 1;
    out->last_import_ms = lim->last_import_ms;
}

int rt_limiter_team_subject(const char *team_id, char out[RT_LIMITER_SUBJECT_MAX + 1])
{
    size_t n = team_id != NULL ? strlen(team_id) : 0;

    if (n == 0 || n > RT_LIMITER_SUBJECT_MAX - 5)
        return TG_EINVAL;
    memcpy(out, "team:", 5);
    memcpy(out + 5, team_id, n + 1);
    return 0;
}
