#include "alert_dedupe.h"

#include <stdlib.h>
#include <string.h>

#include "tg_hash.h"

struct dedupe_entry {
    uint64_t hash; /* of type and subject; 0 = free slot */
    int type;
    char subject[SP_ALERT_SUBJECT_CAP];
    uint64_t window_start_ms; /* when the last passing alert opened the window */
    uint64_t last_seen_ms;    /* for eviction */
    uint64_t suppressed;      /* since the last passing alert */
};

struct sp_dedupe {
    struct dedupe_entry *entries;
    size_t capacity;
    uint64_t evictions;
};

struct sp_dedupe *sp_dedupe_create(size_t capacity)
{
    struct sp_dedupe *d = NULL;

    if (capacity == 0)
        return NULL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->entries = calloc(capacity, sizeof(*d->entries));
    if (d->entries == NULL) {
        free(d);
        return NULL;
    }
    d->capacity = capacity;
    return d;
}

void sp_dedupe_destroy(struct sp_dedupe **d)
{
    if (d == NULL || *d == NULL)
        return;
    free((*d)->entries);
    free(*d);
    *d = NULL;
}

/* FNV-1a over the type and the subject, never 0. */
static uint64_t dedupe_hash(int type, const char *subject)
{
    unsigned char t = (unsigned char)type; /* alert types are < 256 */
    uint64_t h = tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, &t, 1);

    h = tg_hash_fnv1a64(h, subject, strnlen(subject, SP_ALERT_SUBJECT_CAP));
    return h == 0 ? 1 : h;
}

int sp_dedupe_check(struct sp_dedupe *d, int type, const char *subject, uint64_t now_ms,
                    uint64_t window_ms, uint64_t *suppressed_out)
{
    uint64_t h = dedupe_hash(type, subject);
    struct dedupe_entry *free_slot = NULL;
    struct dedupe_entry *oldest = NULL;
    struct dedupe_entry *e = NULL;

    *suppressed_out = 0;
    if (window_ms == 0)
        return 1;
    /* A linear scan: the table is small and bounded, and this runs once per raised alert, not
     * per event. */
    for (size_t i = 0; i < d->capacity; i++) {
        struct dedupe_entry *c = &d->entries[i];

        if (c->hash == 0) {
            if (free_slot == NULL)
                free_slot = c;
            continue;
        }
        if (c->hash == h && c->type == type &&
            strncmp(c->subject, subject, SP_ALERT_SUBJECT_CAP - 1) == 0) {
            e = c;
            break;
        }
        if (oldest == NULL || c->last_seen_ms < oldest->last_seen_ms)
            oldest = c;
    }
    if (e != NULL) {
        e->last_seen_ms = now_ms;
        if (now_ms >= e->window_start_ms && now_ms - e->window_start_ms < window_ms) {
            e->suppressed++;
            return 0;
        }
        *suppressed_out = e->suppressed;
        e->suppressed = 0;
        e->window_start_ms = now_ms;
        return 1;
    }
    if (free_slot == NULL) {
        free_slot = oldest;
        d->evictions++;
    }
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->hash = h;
    free_slot->type = type;
    memcpy(free_slot->subject, subject, strnlen(subject, SP_ALERT_SUBJECT_CAP - 1));
    free_slot->window_start_ms = now_ms;
    free_slot->last_seen_ms = now_ms;
    return 1;
}

uint64_t sp_dedupe_evictions(const struct sp_dedupe *d)
{
    return d->evictions;
}
