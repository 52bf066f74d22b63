#include "tg_hash.h"

#include <stdlib.h>
#include <string.h>

uint64_t tg_hash_fnv1a64_str(const char *s)
{
    return tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, s, strlen(s));
}

struct tg_names_slot {
    const char *name; /* NULL: empty */
    uint64_t hash;
    int value;
};

struct tg_names {
    size_t max;  /* names it takes */
    size_t n;    /* names it holds */
    size_t mask; /* slots - 1 (a power of two, at least 2 * max) */
    struct tg_names_slot *slots;
};

struct tg_names *tg_names_create(size_t max)
{
    struct tg_names *t = calloc(1, sizeof(*t));
    size_t slots = 4;

    if (t == NULL)
        return NULL;
    while (slots < 2 * max)
        slots *= 2;
    t->slots = calloc(slots, sizeof(*t->slots));
    if (t->slots == NULL) {
        free(t);
        return NULL;
    }
    t->max = max;
    t->mask = slots - 1;
    return t;
}

/* The slot of name: where it is, or the empty one where it would go. The table is never full
 * (at most half its slots are taken), so the probe ends. */
static struct tg_names_slot *names_slot(const struct tg_names *t, const char *name, uint64_t h)
{
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        struct tg_names_slot *s = &t->slots[i];

        if (s->name == NULL || (s->hash == h && strcmp(s->name, name) == 0))
            return s;
    }
}

int tg_names_add(struct tg_names *t, const char *name, int value)
{
    uint64_t h = tg_hash_fnv1a64_str(name);
    struct tg_names_slot *s = names_slot(t, name, h);

    if (s->name != NULL)
        return 1;
    if (t->n >= t->max)
        return -1;
    s->name = name;
    s->hash = h;
    s->value = value;
    t->n++;
    return 0;
}

int tg_names_find(const struct tg_names *t, const char *name, int *value)
{
    const struct tg_names_slot *s;

    if (t == NULL || name == NULL)
        return 0;
    s = names_slot(t, name, tg_hash_fnv1a64_str(name));
    if (s->name == NULL)
        return 0;
    *value = s->value;
    return 1;
}

void tg_names_destroy(struct tg_names **t)
{
    if (t == NULL || *t == NULL)
        return;
    free((*t)->slots);
    free(*t);
    *t = NULL;
}
