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

/* Up to this many names, a lookup compares with each in turn: cheaper than a hash then (the
 * router's own benchmark has four model groups). */
#define NAMES_LINEAR 4

struct tg_names {
    size_t max;  /* names it takes */
    size_t n;    /* names it holds */
    size_t mask; /* slots - 1 (a power of two, at least 2 * max) */
    struct tg_names_slot *slots;
    struct tg_names_slot first[NAMES_LINEAR]; /* the first names added, in order */
};

/* The table's hash of the n bytes at s: eight bytes a step (FNV-1a's byte a step cost more than
 * the compare it saves on names of a dozen bytes), then a full mix (MurmurHash3's fmix64), which
 * carries every input bit to the low bits that pick the slot: names that differ only in their
 * last bytes ("group-1", "group-2", ...) must not share a probe sequence. Any function would do:
 * it is never stored. */
static uint64_t names_hash(const char *s, size_t n)
{
    uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull;
    uint64_t w;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, sizeof(w));
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 32;
    }
    if (i < n) {
        w = 0;
        if (n >= 8) {
            memcpy(&w, s + n - 8, sizeof(w)); /* the last eight, overlapping the words before */
        } else {
            for (size_t k = 0; k < n; k++)
                w |= (uint64_t)(unsigned char)s[k] << (8 * k);
        }
        h ^= w;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

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
    uint64_t h = names_hash(name, strlen(name));
    struct tg_names_slot *s = names_slot(t, name, h);

    if (s->name != NULL)
        return 1;
    if (t->n >= t->max)
        return -1;
    s->name = name;
    s->hash = h;
    s->value = value;
    if (t->n < NAMES_LINEAR)
        t->first[t->n] = *s;
    t->n++;
    return 0;
}

int tg_names_find(const struct tg_names *t, const char *name, int *value)
{
    const struct tg_names_slot *s;

    if (t == NULL || name == NULL || t->n == 0)
        return 0;
    if (t->n <= NAMES_LINEAR) {
        for (size_t i = 0; i < t->n; i++) {
            if (strcmp(t->first[i].name, name) == 0) {
                *value = t->first[i].value;
                return 1;
            }
        }
        return 0;
    }
    s = names_slot(t, name, names_hash(name, strlen(name)));
    if (s->name == NULL)
        return 0;
    *value = s->value;
    return 1;
}

size_t tg_names_longest_probe(const struct tg_names *t)
{
    size_t longest = 0;

    for (size_t i = 0; t != NULL && i <= t->mask; i++) {
        const struct tg_names_slot *s = &t->slots[i];

        if (s->name != NULL) {
            size_t home = (size_t)s->hash & t->mask;
            size_t probe = ((i - home) & t->mask) + 1;

            if (probe > longest)
                longest = probe;
        }
    }
    return longest;
}

void tg_names_destroy(struct tg_names **t)
{
    if (t == NULL || *t == NULL)
        return;
    free((*t)->slots);
    free(*t);
    *t = NULL;
}
