/* tg_hash: FNV-1a, 64-bit, the one non-cryptographic hash of Tollgate's in-memory tables.
 * No value of it is stored, sent or compared across processes: tables hash their keys at run
 * time only, so the function may change without a migration. */
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

#endif
