/* pg_fold: the direct path's fold of a batch's request events into spend_daily groups and
 * per-minute Redis increments, in open-addressing tables kept on the connection. */
#include "pg_sink.h"

#include <stdlib.h>
#include <string.h>

#include "pg_int.h"
#include "tg_err.h"
#include "tg_hash.h"

static int field_eq(const struct rec_field *a, const struct rec_field *b)
{
    return a->len == b->len && memcmp(a->p, b->p, (size_t)a->len) == 0;
}

/* fold_ready: an empty table with room for n groups. Returns 0 or TG_ENOMEM. */
static int fold_ready(struct fold **fp, size_t n)
{
    struct fold *f = *fp;
    size_t cap = 64;

    while (cap < n * 2)
        cap *= 2;
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f)
            return TG_ENOMEM;
        *fp = f;
    }
    if (f->cap < cap) {
        struct fold_ent *e = malloc(cap * sizeof(*e));
        if (!e)
            return TG_ENOMEM;
        free(f->e);
        f->e = e;
        f->cap = cap;
    }
    for (size_t i = 0; i < f->cap; i++)
        f->e[i].rec = -1;
    f->n = 0;
    return 0;
}

/* fold_add: add event i (fields f) to the group (t, the fields named in cols) of table fd. */
static void fold_add(struct fold *fd, const struct sp_pg_batch *b, int i,
                     const struct rec_field *f, int64_t t, const int *cols, int ncols)
{
    uint64_t h = tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, &t, sizeof(t));
    size_t j;

    for (int k = 0; k < ncols; k++) {
        h = tg_hash_fnv1a64(h, f[cols[k]].p, (size_t)f[cols[k]].len);
        h = tg_hash_fnv1a64(h, "", 1);
    }
    for (j = h & (fd->cap - 1);; j = (j + 1) & (fd->cap - 1)) {
        struct fold_ent *e = &fd->e[j];
        struct rec_field g[SP_PG_NCOLS];
        int same = 1;

        if (e->rec < 0) {
            memset(e, 0, sizeof(*e));
            e->h = h;
            e->rec = i;
            e->t = t;
            fd->n++;
            break;
        }
        if (e->h != h || e->t != t)
            continue;
        sp_pg_rec_fields(b, e->rec, g);
        for (int k = 0; k < ncols && same; k++)
            same = field_eq(&g[cols[k]], &f[cols[k]]);
        if (same)
            break;
    }
    fd->e[j].requests++;
    fd->e[j].failures += sp_pg_rec_int(&f[C_STATUS]) >= 400;
    fd->e[j].prompt += sp_pg_rec_int(&f[C_PROMPT]);
    fd->e[j].completion += sp_pg_rec_int(&f[C_COMPLETION]);
    fd->e[j].cost += sp_pg_rec_int(&f[C_COST]);
}

static void copy_field(char *dst, size_t cap, const struct rec_field *f)
{
    size_t n = (size_t)f->len < cap - 1 ? (size_t)f->len : cap - 1;

    memcpy(dst, f->p, n);
    dst[n] = '\0';
}

/* sp_pg_fold_batch: the batch's request events grouped by (day, key, team, model group,
 * deployment) into pg->daily and by (minute, key, team, model group) into b->incr, as the
 * temp-table statement does in SQL. Returns 0 or TG_ENOMEM. */
int sp_pg_fold_batch(struct sp_pg *pg, struct sp_pg_batch *b)
{
    static const int dcols[] = {C_KEY_HASH, C_TEAM, C_MODEL_GROUP, C_DEPLOYMENT};
    static const int mcols[] = {C_KEY_HASH, C_TEAM, C_MODEL_GROUP};

    if (fold_ready(&pg->daily, (size_t)b->nev) < 0 || fold_ready(&pg->minute, (size_t)b->nev) < 0)
        return TG_ENOMEM;
    for (int i = 0; i < b->nev; i++) {
        struct rec_field f[SP_PG_NCOLS];
        int64_t ts;

        sp_pg_rec_fields(b, i, f);
        if (f[C_KIND].len != 7 || memcmp(f[C_KIND].p, "request", 7) != 0)
            continue;
        ts = sp_pg_rec_int(&f[C_TS_END]);
        fold_add(pg->daily, b, i, f, ts / 86400000, dcols, 4);
        fold_add(pg->minute, b, i, f, (ts / 60000) * 60000, mcols, 3);
    }
    b->nincr = 0;
    for (size_t j = 0; j < pg->minute->cap && b->incr; j++) {
        const struct fold_ent *e = &pg->minute->e[j];
        struct rec_field g[SP_PG_NCOLS];
        struct sp_pg_incr *in;

        if (e->rec < 0 || b->nincr >= b->cap_events)
            continue;
        sp_pg_rec_fields(b, e->rec, g);
        in = &b->incr[b->nincr++];
        in->minute_ms = e->t;
        copy_field(in->key_hash, sizeof(in->key_hash), &g[C_KEY_HASH]);
        copy_field(in->team_id, sizeof(in->team_id), &g[C_TEAM]);
        copy_field(in->model_group, sizeof(in->model_group), &g[C_MODEL_GROUP]);
        in->requests = e->requests;
        in->failures = e->failures;
        in->prompt_tokens = e->prompt;
        in->completion_tokens = e->completion;
        in->cost_nusd = e->cost;
    }
    return 0;
}
