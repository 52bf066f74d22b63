/* limsync_reply: the check of the limit sync script's answer (limsync.c), the one part of the
 * exchange that reads what Redis sent beyond hiredis's reader. Pure; fuzzed (limsync_reply_fuzz).
 *
 * Expected: an array of 1 + 3n integers >= 0: the live replicas, then for each of the n subjects
 * sent the other replicas' requests, tokens and parallel requests. Anything else (an error
 * reply, another type, another length, a negative number) is refused whole: no count of a round
 * is used unless all are good.
 *
 * Threads: any. */
#ifndef RT_LIMSYNC_REPLY_H
#define RT_LIMSYNC_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"

struct redisReply; /* hiredis */

/* rt_limsync_reply_apply: r (borrowed) into e[0, n).remote_* and *replicas (>= 1). Returns 0,
 * or TG_EPROTO with the reason in why (an error reply's text, cut at 100 bytes) and nothing
 * written to e. */
int rt_limsync_reply_apply(const struct redisReply *r, struct rt_limiter_sync_entry *e, uint32_t n,
                           uint32_t *replicas, char *why, size_t whylen);

#endif
