/* tg_hash: FNV-1a, 64-bit, the non-cryptographic hash of Tollgate's in-memory tables, and
 * tg_names, a table of names with a hash of its own (a word at a time, for short names looked up
 * on every request). No value of either is stored, sent or compared across processes: tables
 * hash their keys at run time only, so the functions may change without a migration. */
#ifndef TG_HASH_H
#define TG_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TG_HASH_FNV1A64_INIT 14695981039346656037ull /* FNV-1a 64-bit offset basis */
#define TG_HASH_FNV1A64_PRIME 1099511628211ull       /* FNV-1a 64-bit prime */

/* tg_hash_fnv1a64: continue h (start with TG_HASH_FNV1A64_INIT) over n bytes at p (borrowed).
 * Pure; any thread. Inline: tables hash a key on every lookup. */
static inline uint64_t tg_hash_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;

    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= TG_HASH_FNV1A64_PRIME;
    }
    return h;
}

/* tg_hash_fnv1a64_str: the hash of the NUL-terminated s (borrowed), its NUL excluded. Pure; any
 * thread. */
uint64_t tg_hash_fnv1a64_str(const char *s);

/* ---- tg_names: a name -> int table, filled once and then only read ----
 * For the names a configuration gives (model groups, aliases, deployment ids), which the request
 * path looks up on every request: a lookup costs a hash of the name and, in general, one string
 * compare, however many names there are (a loop of strcmp over 300 deployments cost thousands of
 * instructions a request); a table of up to four names compares with each instead. Open
 * addressing in a power-of-two array of at least twice the names it may hold: bounded by that
 * capacity, fixed at creation (tg_names_add refuses past it). Names are borrowed: they must
 * outlive the table (the configuration's strings do). Filled by one thread before it is shared;
 * lookups from any thread after that, without a lock. */
struct tg_names;

/* tg_names_create: room for max names. NULL when out of memory. */
struct tg_names *tg_names_create(size_t max);

/* tg_names_add: map name to value. The first mapping of a name stays (returns 1, value not
 * taken: as a loop that returns its first match), or 0; -1 past max names (nothing added). */
int tg_names_add(struct tg_names *t, const char *name, int value);

/* tg_names_find: 1 and *value when name is in the table, else 0. t may be NULL (empty). */
int tg_names_find(const struct tg_names *t, const char *name, int *value);

/* tg_names_longest_probe: the most slots a lookup of a name in t reads (1: every name in its
 * own slot); for tests and diagnostics, of the hash's spread. */
size_t tg_names_longest_probe(const struct tg_names *t);

/* tg_names_destroy: free the table; *t becomes NULL. */
void tg_names_destroy(struct tg_names **t);

#endif
