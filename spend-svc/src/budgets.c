#include "budgets.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "proto_control.h"
#include "tg_err.h"
#include "tg_hash.h"
#include "tg_log.h"
#include "tg_metrics.h"
#include "tg_period.h"
#include "tg_time.h"

/* A key of the mirror. Open addressing; deleted slots become tombstones reused on insert. */
struct bkey {
    char hash[SP_PG_SUBJECT_MAX];
    char alias[SP_PG_SUBJECT_MAX];
    char team[SP_PG_SUBJECT_MAX];
    int64_t max_budget_nusd; /* -1: none */
    int64_t period_s;        /* multiple of 60, 0: none */
    uint8_t state;           /* 0 empty, 1 used, 2 tombstone */
};

/* A published block. */
struct bblock {
    char kind[8];
    char subject[SP_PG_SUBJECT_MAX];
    int64_t period_start_ms;
};

struct sp_budgets {
    struct sp_budgets_hooks hooks;
    int thresholds[SP_CONFIG_THRESHOLDS_MAX];
    int nthresholds;
    struct sp_config_team teams[SP_CONFIG_TEAMS_MAX];
    int nteams;
    struct sp_config_team *mteams; /* [SP_BUDGET_TEAMS_MIRROR_MAX] team: records with a budget,
                                    * sorted by team_id; guarded by mu */
    size_t nmteams;

    pthread_mutex_t mu;      /* guards keys (read by the Redis thread) */
    struct bkey *keys;       /* [nslots] */
    size_t nslots;
    size_t nkeys;            /* used */
    size_t nused_or_dead;    /* used + tombstones */
    size_t keys_max;

    struct bblock *blocks;   /* [keys_max] consumer thread only */
    size_t nblocks;

    /* scratch for after_batch, [keys_max] each */
    char (*subj)[SP_PG_SUBJECT_MAX];
    char (*hashes)[SP_PG_SUBJECT_MAX]; /* keys of a team being (un)blocked */
    const char **subjp;
    int64_t *since;
    int64_t *period;
    int64_t *maxb;
    struct sp_pg_totals *tot;

    _Atomic uint64_t keys_full;
    _Atomic uint64_t teams_full;
    _Atomic uint64_t crossings;
    _Atomic uint64_t blocks_published;
    _Atomic uint64_t unblocks_published;
    _Atomic uint64_t publish_errors;
};

/* A budget period as the mirror keeps it: at most SP_BUDGET_LIFETIME_S (a longer one never rolls
 * over either, and period arithmetic in milliseconds stays far from overflow), rounded up to a
 * whole minute. */
static int64_t period_norm(int64_t p)
{
    if (p > SP_BUDGET_LIFETIME_S)
        p = SP_BUDGET_LIFETIME_S;
    if (p % 60)
        p += 60 - p % 60;
    return p;
}

struct sp_budgets *sp_budgets_create(const struct sp_config *cfg,
                                     const struct sp_budgets_hooks *hooks, char *err,
                                     size_t errlen)
{
    struct sp_budgets *b = calloc(1, sizeof(*b));
    size_t cap = cfg->keys_max > 0 ? (size_t)cfg->keys_max : 16;
    size_t n = 16;

    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (hooks)
        b->hooks = *hooks;
    b->nthresholds = cfg->budget_thresholds_n;
    memcpy(b->thresholds, cfg->budget_thresholds, sizeof(b->thresholds));
    b->nteams = cfg->teams_n;
    memcpy(b->teams, cfg->teams, sizeof(b->teams[0]) * (size_t)cfg->teams_n);
    for (int i = 0; i < b->nteams; i++)
        b->teams[i].budget_period_s = period_norm(b->teams[i].budget_period_s);
    pthread_mutex_init(&b->mu, NULL);
    while (n < cap + cap / 3 + 1)
        n *= 2;
    b->nslots = n;
    b->keys_max = cap;
    b->keys = calloc(n, sizeof(*b->keys));
    b->blocks = calloc(cap, sizeof(*b->blocks));
    b->subj = calloc(cap, sizeof(*b->subj));
    b->hashes = calloc(cap, sizeof(*b->hashes));
    b->subjp = calloc(cap, sizeof(*b->subjp));
    b->since = calloc(cap, sizeof(*b->since));
    b->period = calloc(cap, sizeof(*b->period));
    b->maxb = calloc(cap, sizeof(*b->maxb));
    b->tot = calloc(cap, sizeof(*b->tot));
    b->mteams = calloc(SP_BUDGET_TEAMS_MIRROR_MAX, sizeof(*b->mteams));
    if (!b->mteams || !b->keys || !b->blocks || !b->subj || !b->hashes || !b->subjp ||
        !b->since || !b->period || !b->maxb ||
        !b->tot) {
        snprintf(err, errlen, "out of memory for %zu keys", cap);
        sp_budgets_destroy(&b);
        return NULL;
    }
    return b;
}

void sp_budgets_destroy(struct sp_budgets **bp)
{
    struct sp_budgets *b;

    if (!bp || !*bp)
        return;
    b = *bp;
    free(b->keys);
    free(b->blocks);
    free(b->subj);
    free(b->hashes);
    free(b->subjp);
    free(b->since);
    free(b->period);
    free(b->maxb);
    free(b->tot);
    free(b->mteams);
    pthread_mutex_destroy(&b->mu);
    free(b);
    *bp = NULL;
}

/* Control topic records (proto_control.h) ---------------------------------------------------- */

int sp_budgets_record_decode(const char *key, size_t keylen, const void *value, size_t len,
                             struct sp_pg_key *k, char **metadata)
{
    struct proto_ctl_key rec;
    enum proto_ctl_kind kind;
    char hash[PROTO_CTL_HASH_LEN + 1];
    char err[128];
    int rc;

    memset(k, 0, sizeof(*k));
    *metadata = NULL;
    rc = proto_ctl_parse_key(key, keylen, &kind, hash, err, sizeof(err));
    if (rc == TG_ENOTFOUND || (rc == 0 && kind != PROTO_CTL_KEY))
        return SP_RECORD_SKIP;
    if (rc != 0) {
        TG_WARN_RL("msg=\"control record skipped\" problem=\"%s\"", err);
        return TG_EINVAL;
    }
    snprintf(k->key_hash, sizeof(k->key_hash), "%s", hash);
    if (value == NULL)
        return SP_RECORD_KEY_DELETE;
    rc = proto_ctl_key_decode(hash, value, len, &rec, err, sizeof(err));
    if (rc != 0) {
        TG_WARN_RL("msg=\"control record skipped\" problem=\"%s\"", err);
        return TG_EINVAL;
    }
    snprintf(k->key_alias, sizeof(k->key_alias), "%s", rec.key_alias);
    snprintf(k->team_id, sizeof(k->team_id), "%s", rec.team_id);
    snprintf(k->user_id, sizeof(k->user_id), "%s", rec.user_id);
    k->max_budget_nusd = rec.max_budget_nusd;
    k->budget_period_s = rec.budget_duration_s;
    *metadata = rec.metadata_json; /* handed over: the caller frees it */
    k->metadata_json = *metadata;
    return SP_RECORD_KEY_PUT;
}

/* key_find: slot of hash, or NULL. mu held. */
static struct bkey *key_find(struct sp_budgets *b, const char *hash)
{
    size_t mask = b->nslots - 1;
    size_t i = (size_t)tg_hash_fnv1a64_str(hash) & mask;

    for (size_t probes = 0; probes < b->nslots; probes++) {
        struct bkey *k = &b->keys[i];
        if (k->state == 0)
            return NULL;
        if (k->state == 1 && strcmp(k->hash, hash) == 0)
            return k;
        i = (i + 1) & mask;
    }
    return NULL;
}

int sp_budgets_key_set(struct sp_budgets *b, const struct sp_pg_key *src)
{
    struct bkey *k;
    size_t mask = b->nslots - 1;
    size_t i;
    int rc = 0;

    pthread_mutex_lock(&b->mu);
    k = key_find(b, src->key_hash);
    if (!k) {
        if (b->nkeys >= b->keys_max || b->nused_or_dead >= b->nslots - 1) {
            atomic_fetch_add(&b->keys_full, 1);
            TG_WARN_RL("msg=\"budget key table full\" capacity=%zu", b->keys_max);
            rc = TG_EFULL;
            goto out;
        }
        i = (size_t)tg_hash_fnv1a64_str(src->key_hash) & mask;
        while (b->keys[i].state == 1)
            i = (i + 1) & mask;
        k = &b->keys[i];
        if (k->state == 0)
            b->nused_or_dead++;
        k->state = 1;
        b->nkeys++;
    }
    snprintf(k->hash, sizeof(k->hash), "%s", src->key_hash);
    snprintf(k->alias, sizeof(k->alias), "%s", src->key_alias);
    snprintf(k->team, sizeof(k->team), "%s", src->team_id);
    k->max_budget_nusd = src->max_budget_nusd;
    k->period_s = src->max_budget_nusd >= 0 ? src->budget_period_s : 0;
    if (k->max_budget_nusd >= 0 && k->period_s <= 0)
        k->period_s = SP_BUDGET_LIFETIME_S; /* no duration: one period that never rolls over */
    k->period_s = period_norm(k->period_s);
out:
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void sp_budgets_key_delete(struct sp_budgets *b, const char *key_hash)
{
    struct bkey *k;

    pthread_mutex_lock(&b->mu);
    k = key_find(b, key_hash);
    if (k) {
        k->state = 2;
        b->nkeys--;
    }
    pthread_mutex_unlock(&b->mu);
}

/* mteam_pos: index of id in the mirrored teams, or where it goes (*found 0). mu held. */
static size_t mteam_pos(const struct sp_budgets *b, const char *id, int *found)
{
    size_t lo = 0, hi = b->nmteams;

    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(b->mteams[mid].team_id, id);

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

/* team_get: the budget of team (config teams first, then the team: records) copied into out.
 * Returns 1 when the team has a budget, else 0. Any thread (takes mu). */
static int team_get(struct sp_budgets *b, const char *team, struct sp_config_team *out)
{
    int found = 0;
    size_t i;

    for (int c = 0; c < b->nteams; c++) {
        if (strcmp(b->teams[c].team_id, team) == 0) {
            *out = b->teams[c];
            return 1;
        }
    }
    pthread_mutex_lock(&b->mu);
    i = mteam_pos(b, team, &found);
    if (found)
        *out = b->mteams[i];
    pthread_mutex_unlock(&b->mu);
    return found;
}

int sp_budgets_team_record(struct sp_budgets *b, const char *key, size_t keylen,
                           const void *value, size_t len)
{
    char id[PROTO_CTL_TEAM_ID_MAX + 1], err[160];
    struct proto_ctl_team t;
    int found, rc;
    size_t i;

    rc = proto_ctl_parse_team_key(key, keylen, id, err, sizeof(err));
    if (rc == TG_ENOTFOUND)
        return 0;
    if (rc == 0 && value != NULL)
        rc = proto_ctl_team_decode(id, value, len, &t, err, sizeof(err));
    if (rc != 0) {
        TG_WARN_RL("msg=\"control team record skipped\" problem=\"%s\"", err);
        return 1;
    }
    pthread_mutex_lock(&b->mu);
    i = mteam_pos(b, id, &found);
    if (value == NULL || t.max_budget_nusd < 0) {
        /* deleted, or no budget: nothing to enforce */
        if (found) {
            memmove(&b->mteams[i], &b->mteams[i + 1],
                    (b->nmteams - i - 1) * sizeof(b->mteams[0]));
            b->nmteams--;
        }
        goto out;
    }
    if (!found) {
        if (b->nmteams >= SP_BUDGET_TEAMS_MIRROR_MAX) {
            atomic_fetch_add(&b->teams_full, 1);
            TG_WARN_RL("msg=\"budget team table full\" capacity=%d", SP_BUDGET_TEAMS_MIRROR_MAX);
            goto out;
        }
        memmove(&b->mteams[i + 1], &b->mteams[i], (b->nmteams - i) * sizeof(b->mteams[0]));
        b->nmteams++;
    }
    snprintf(b->mteams[i].team_id, sizeof(b->mteams[i].team_id), "%s", id);
    b->mteams[i].max_budget_nusd = t.max_budget_nusd;
    /* no duration: one period that never rolls over, as for keys */
    b->mteams[i].budget_period_s =
        period_norm(t.budget_duration_s > 0 ? t.budget_duration_s : SP_BUDGET_LIFETIME_S);
out:
    pthread_mutex_unlock(&b->mu);
    return 1;
}

int64_t sp_budgets_period_of(void *ctx, int by_team, const char *subject)
{
    struct sp_budgets *b = ctx;
    int64_t p = 0;

    if (by_team) {
        struct sp_config_team t;

        return team_get(b, subject, &t) ? t.budget_period_s : 0;
    }
    pthread_mutex_lock(&b->mu);
    struct bkey *k = key_find(b, subject);
    if (k && k->max_budget_nusd >= 0)
        p = k->period_s;
    pthread_mutex_unlock(&b->mu);
    return p;
}

int sp_budgets_list(void *ctx, int by_team, char (*subject)[SP_PG_SUBJECT_MAX], int64_t *period_s,
                    int cap)
{
    struct sp_budgets *b = ctx;
    int n = 0;

    if (by_team) {
        for (int i = 0; i < b->nteams && n < cap; i++) {
            snprintf(subject[n], SP_PG_SUBJECT_MAX, "%s", b->teams[i].team_id);
            period_s[n] = b->teams[i].budget_period_s;
            n++;
        }
        pthread_mutex_lock(&b->mu);
        for (size_t i = 0; i < b->nmteams && n < cap; i++) {
            struct sp_config_team t;
            int dup = 0;

            for (int c = 0; c < b->nteams; c++)
                dup |= strcmp(b->teams[c].team_id, b->mteams[i].team_id) == 0;
            if (dup)
                continue; /* the config's budget is the one enforced */
            t = b->mteams[i];
            snprintf(subject[n], SP_PG_SUBJECT_MAX, "%s", t.team_id);
            period_s[n] = t.budget_period_s;
            n++;
        }
        pthread_mutex_unlock(&b->mu);
        return n;
    }
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->nslots && n < cap; i++) {
        struct bkey *k = &b->keys[i];
        if (k->state != 1 || k->max_budget_nusd < 0)
            continue;
        snprintf(subject[n], SP_PG_SUBJECT_MAX, "%s", k->hash);
        period_s[n] = k->period_s;
        n++;
    }
    pthread_mutex_unlock(&b->mu);
    return n;
}

/* Blocks ------------------------------------------------------------------------------------------- */

static struct bblock *block_find(struct sp_budgets *b, const char *kind, const char *subject)
{
    for (size_t i = 0; i < b->nblocks; i++)
        if (strcmp(b->blocks[i].kind, kind) == 0 && strcmp(b->blocks[i].subject, subject) == 0)
            return &b->blocks[i];
    return NULL;
}

static void load_blocked_row(void *ctx, const char *kind, const char *subject,
                             int64_t period_start_ms)
{
    struct sp_budgets *b = ctx;
    struct bblock *bl = block_find(b, kind, subject);

    if (!bl) {
        if (b->nblocks >= b->keys_max)
            return;
        bl = &b->blocks[b->nblocks++];
    }
    snprintf(bl->kind, sizeof(bl->kind), "%s", kind);
    snprintf(bl->subject, sizeof(bl->subject), "%s", subject);
    bl->period_start_ms = period_start_ms;
}

int sp_budgets_load_blocked(struct sp_budgets *b, struct sp_pg *pg)
{
    b->nblocks = 0;
    return sp_pg_budget_blocked(pg, load_blocked_row, b);
}

/* publish_key: block (value JSON) or unblock (tombstone) one key hash. */
static int publish_key(struct sp_budgets *b, const char *hash, const char *value)
{
    char rkey[PROTO_CTL_RECORD_KEY_MAX];
    int rc;

    if (!b->hooks.publish)
        return TG_EUNAVAIL;
    if (proto_ctl_record_key(PROTO_CTL_BLOCK, hash, rkey, sizeof(rkey)) < 0)
        return TG_EINVAL; /* not a key hash: nothing the router could apply */
    rc = b->hooks.publish(b->hooks.ctx, rkey, value, value ? strlen(value) : 0);
    if (rc < 0) {
        atomic_fetch_add(&b->publish_errors, 1);
        TG_WARN_RL("msg=\"control topic publish failed\" err=%s", tg_errname(rc));
        return rc;
    }
    if (value)
        atomic_fetch_add(&b->blocks_published, 1);
    else
        atomic_fetch_add(&b->unblocks_published, 1);
    return 0;
}

/* publish_subject: a key's own block, or the block of every key of a team. */
static int publish_subject(struct sp_budgets *b, const char *kind, const char *subject,
                           const char *value)
{
    int rc = 0;

    if (strcmp(kind, "key") == 0)
        return publish_key(b, subject, value);
    /* team: every key of the mirror with that team (copied out under the lock) */
    char(*hashes)[SP_PG_SUBJECT_MAX] = b->hashes;
    size_t n = 0;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->nslots && n < b->keys_max; i++)
        if (b->keys[i].state == 1 && strcmp(b->keys[i].team, subject) == 0)
            snprintf(hashes[n++], SP_PG_SUBJECT_MAX, "%s", b->keys[i].hash);
    pthread_mutex_unlock(&b->mu);
    for (size_t i = 0; i < n; i++) {
        int r = publish_key(b, hashes[i], value);
        if (r < 0)
            rc = r;
    }
    return rc;
}

static int block(struct sp_budgets *b, struct sp_pg *pg, const struct sp_budget_crossing *c)
{
    char value[PROTO_CTL_BLOCK_JSON_MAX];
    struct proto_ctl_block pb;
    struct bblock *bl;
    size_t vlen;
    int rc;

    bl = block_find(b, c->kind, c->subject);
    if (bl && bl->period_start_ms == c->period_start_ms)
        return 0; /* already published for this period */
    proto_ctl_block_init(&pb);
    snprintf(pb.reason, sizeof(pb.reason), "budget_exceeded");
    pb.since_ms = (int64_t)tg_now_epoch_ms();
    pb.until_ms = c->period_end_ms;
    snprintf(pb.scope, sizeof(pb.scope), "%s", c->kind);
    pb.period_start_ms = c->period_start_ms;
    pb.spend_nusd = c->spend_nusd;
    pb.max_budget_nusd = c->max_budget_nusd;
    rc = proto_ctl_block_encode(&pb, value, sizeof(value), &vlen);
    if (rc < 0)
        return rc;
    rc = publish_subject(b, c->kind, c->subject, value);
    if (rc < 0)
        return rc;
    rc = sp_pg_budget_set_blocked(pg, c->kind, c->subject, c->period_start_ms, 1);
    if (rc < 0)
        return rc;
    if (!bl) {
        if (b->nblocks >= b->keys_max)
            return TG_EFULL;
        bl = &b->blocks[b->nblocks++];
    }
    snprintf(bl->kind, sizeof(bl->kind), "%s", c->kind);
    snprintf(bl->subject, sizeof(bl->subject), "%s", c->subject);
    bl->period_start_ms = c->period_start_ms;
    TG_INFO("msg=\"budget exceeded, block published\" scope=%s spend_nusd=%" PRId64
            " max_budget_nusd=%" PRId64,
            c->kind, c->spend_nusd, c->max_budget_nusd);
    return 0;
}

/* Checks ------------------------------------------------------------------------------------------- */

/* check: totals of n subjects (b->subj etc. filled), thresholds, blocks. */
static int check(struct sp_budgets *b, struct sp_pg *pg, int by_team, int n, int64_t now_ms)
{
    int rc;

    for (int i = 0; i < n; i++)
        b->subjp[i] = b->subj[i];
    rc = sp_pg_totals_since(pg, by_team, b->subjp, b->since, n, b->tot);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        struct sp_budget_crossing c;
        int64_t spend = b->tot[i].cost_nusd;
        int level = 0;
        int raised = 0;
        for (int t = 0; t < b->nthresholds; t++) {
            /* spend * 100 >= max * pct without overflow for realistic amounts */
            if ((__int128)spend * 100 >= (__int128)b->maxb[i] * b->thresholds[t])
                level = b->thresholds[t];
        }
        if (level == 0)
            continue;
        memset(&c, 0, sizeof(c));
        snprintf(c.kind, sizeof(c.kind), "%s", by_team ? "team" : "key");
        snprintf(c.subject, sizeof(c.subject), "%s", b->subj[i]);
        c.threshold_pct = level;
        c.spend_nusd = spend;
        c.max_budget_nusd = b->maxb[i];
        c.period_start_ms = b->since[i];
        tg_period_window(b->period[i], b->since[i], NULL, &c.period_end_ms);
        if (by_team) {
            snprintf(c.name, sizeof(c.name), "%s", b->subj[i]);
        } else {
            pthread_mutex_lock(&b->mu);
            struct bkey *k = key_find(b, b->subj[i]);
            if (k && k->alias[0])
                snprintf(c.name, sizeof(c.name), "%s", k->alias);
            else
                snprintf(c.name, sizeof(c.name), "%.12s", b->subj[i]);
            pthread_mutex_unlock(&b->mu);
        }
        rc = sp_pg_budget_raise(pg, c.kind, c.subject, c.period_start_ms, level, &raised);
        if (rc < 0)
            return rc;
        if (raised) {
            atomic_fetch_add(&b->crossings, 1);
            if (b->hooks.crossing)
                b->hooks.crossing(b->hooks.ctx, &c);
        }
        if (level >= 100) {
            rc = block(b, pg, &c);
            if (rc < 0)
                return rc;
        }
    }
    (void)now_ms;
    return 0;
}

static int subj_seen(struct sp_budgets *b, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(b->subj[i], s) == 0)
            return 1;
    return 0;
}

int sp_budgets_after_batch(struct sp_budgets *b, struct sp_pg *pg, const struct sp_pg_incr *incr,
                           int n, int64_t now_ms)
{
    int m = 0;
    int rc;

    /* keys */
    for (int i = 0; i < n && (size_t)m < b->keys_max; i++) {
        const char *h = incr[i].key_hash;
        int64_t p = 0;
        int64_t maxb = -1;
        if (!h[0] || subj_seen(b, m, h))
            continue;
        pthread_mutex_lock(&b->mu);
        struct bkey *k = key_find(b, h);
        if (k && k->max_budget_nusd >= 0) {
            p = k->period_s;
            maxb = k->max_budget_nusd;
        }
        pthread_mutex_unlock(&b->mu);
        if (p <= 0)
            continue;
        snprintf(b->subj[m], SP_PG_SUBJECT_MAX, "%s", h);
        b->period[m] = p;
        b->maxb[m] = maxb;
        tg_period_window(p, now_ms, &b->since[m], NULL);
        m++;
    }
    rc = check(b, pg, 0, m, now_ms);
    if (rc < 0)
        return rc;
    /* teams */
    m = 0;
    for (int i = 0; i < n && (size_t)m < b->keys_max; i++) {
        const char *t = incr[i].team_id;
        struct sp_config_team team;
        if (!t[0] || subj_seen(b, m, t))
            continue;
        if (!team_get(b, t, &team))
            continue;
        snprintf(b->subj[m], SP_PG_SUBJECT_MAX, "%s", t);
        b->period[m] = team.budget_period_s;
        b->maxb[m] = team.max_budget_nusd;
        tg_period_window(team.budget_period_s, now_ms, &b->since[m], NULL);
        m++;
    }
    return check(b, pg, 1, m, now_ms);
}

int sp_budgets_tick(struct sp_budgets *b, struct sp_pg *pg, int64_t now_ms)
{
    size_t i = 0;
    int rc = 0;

    while (i < b->nblocks) {
        struct bblock *bl = &b->blocks[i];
        int64_t period = 0;
        int lift;
        if (strcmp(bl->kind, "team") == 0) {
            struct sp_config_team t;

            period = team_get(b, bl->subject, &t) ? t.budget_period_s : 0;
        } else {
            period = sp_budgets_period_of(b, 0, bl->subject);
        }
        if (period > 0) {
            int64_t end_ms;

            tg_period_window(period, bl->period_start_ms, NULL, &end_ms);
            lift = end_ms <= now_ms;
        } else {
            lift = 1;
        }
        if (!lift) {
            i++;
            continue;
        }
        rc = publish_subject(b, bl->kind, bl->subject, NULL);
        if (rc == 0)
            rc = sp_pg_budget_set_blocked(pg, bl->kind, bl->subject, bl->period_start_ms, 0);
        if (rc < 0)
            return rc;
        TG_INFO("msg=\"budget period over, block lifted\" scope=%s", bl->kind);
        b->blocks[i] = b->blocks[b->nblocks - 1];
        b->nblocks--;
    }
    return 0;
}

void sp_budgets_write_metrics(struct sp_budgets *b, struct tg_buf *buf)
{
    size_t nkeys;

    pthread_mutex_lock(&b->mu);
    nkeys = b->nkeys;
    pthread_mutex_unlock(&b->mu);
    tg_prom_gauge(buf, "tollgate_spend_budget_keys", "Keys mirrored from the control topic",
                  (double)nkeys);
    tg_prom_counter(buf, "tollgate_spend_budget_keys_full_total",
                    "Keys not tracked because the table was full (budgets.keys_max)",
                    atomic_load(&b->keys_full));
    tg_prom_counter(buf, "tollgate_spend_budget_teams_full_total",
                    "Team budgets not tracked because the table was full",
                    atomic_load(&b->teams_full));
    tg_prom_counter(buf, "tollgate_spend_budget_crossings_total", "Budget thresholds reached",
                    atomic_load(&b->crossings));
    tg_prom_counter(buf, "tollgate_spend_budget_blocks_total", "Block records published",
                    atomic_load(&b->blocks_published));
    tg_prom_counter(buf, "tollgate_spend_budget_unblocks_total", "Unblock tombstones published",
                    atomic_load(&b->unblocks_published));
    tg_prom_counter(buf, "tollgate_spend_budget_publish_errors_total",
                    "Control topic publishes that failed", atomic_load(&b->publish_errors));
}
