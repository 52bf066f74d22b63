#include "tg_hash.h"

#include <string.h>

#define TG_HASH_FNV1A64_PRIME 1099511628211ull

uint64_t tg_hash_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;

    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= TG_HASH_FNV1A64_PRIME;
    }
    return h;
}

uint64_t tg_hash_fnv1a64_str(const char *s)
{
    return tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, s, strlen(s));
}
