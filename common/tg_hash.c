#include "tg_hash.h"

#include <string.h>

uint64_t tg_hash_fnv1a64_str(const char *s)
{
    return tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, s, strlen(s));
}
