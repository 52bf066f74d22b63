/* limsync_reply: see limsync_reply.h. */
#include "limsync_reply.h"

#include <stdio.h>

#include <hiredis/hiredis.h>

#include "tg_err.h"

int rt_limsync_reply_apply(const struct redisReply *r, struct rt_limiter_sync_entry *e, uint32_t n,
                           uint32_t *replicas, char *why, size_t whylen)
{
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "error reply: %.100s", r->str != NULL ? r->str : "");
        return TG_EPROTO;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(why, whylen, "expected an array, got reply type %d", r->type);
        return TG_EPROTO;
    }
    if (r->elements != 1u + 3u * (size_t)n) {
        snprintf(why, whylen, "expected %llu elements, got %llu", 1ull + 3ull * n,
                 (unsigned long long)r->elements);
        return TG_EPROTO;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const struct redisReply *x = r->element[i];

        if (x == NULL || x->type != REDIS_REPLY_INTEGER || x->integer < 0) {
            snprintf(why, whylen, "element %llu is not a count", (unsigned long long)i);
            return TG_EPROTO;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        e[i].remote_reqs = (uint64_t)r->element[1 + 3 * i]->integer;
        e[i].remote_tokens = (uint64_t)r->element[2 + 3 * i]->integer;
        e[i].remote_in_flight = (uint64_t)r->element[3 + 3 * i]->integer;
    }
    if (r->element[0]->integer == 0)
        *replicas = 1;
    else if (r->element[0]->integer > (long long)UINT32_MAX)
        *replicas = UINT32_MAX;
    else
        *replicas = (uint32_t)r->element[0]->integer;
    return 0;
}
