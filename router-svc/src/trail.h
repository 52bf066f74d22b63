/* trail: the bounded retry record of one request.
 *
 * A ring of TG_TRAIL_MAX_ENTRIES struct proto_attempt values (value copies, fixed-size strings),
 * plus a count of every attempt made. When full, the oldest entry is overwritten (the newest
 * TG_TRAIL_MAX_ENTRIES are kept, DESIGN invariant 2): a request with 1,000 failed attempts holds
 * exactly the same bytes as one with 4. Nothing in a trail ever points anywhere: copying a trail
 * copies values, so no entry can contain another one.
 *
 * Messages are masked with rt_mask (mask.h) before they are stored: a trail never holds a secret.
 *
 * Threads: a trail lives in one request's plan and is used by one thread at a time. */
#ifndef RT_TRAIL_H
#define RT_TRAIL_H

#include <stddef.h>
#include <stdint.h>

#include "proto_event.h"

struct rt_mask;

struct rt_trail {
    struct proto_attempt ring[TG_TRAIL_MAX_ENTRIES]; /* entries, ring order */
    uint32_t head;                                   /* index of the oldest entry */
    uint32_t len;                                    /* entries held, <= TG_TRAIL_MAX_ENTRIES */
    uint64_t total; /* attempts added since init (may exceed len) */
};

/* rt_trail_init: empty trail in caller storage. */
void rt_trail_init(struct rt_trail *trail);

/* rt_trail_add: append one attempt, overwriting the oldest when full. Every string is copied
 * and cut to its field (at a UTF-8 boundary); group/deployment_id/error_class/message may be
 * NULL (""). message (msglen bytes, need not be NUL-terminated) is masked with mask (borrowed;
 * NULL = built-in patterns only) into the entry's PROTO_MESSAGE_CAP bytes. */
void rt_trail_add(struct rt_trail *trail, const struct rt_mask *mask, const char *group,
                  const char *deployment_id, int32_t http_status, const char *error_class,
                  uint32_t latency_ms, const char *message, size_t msglen);

/* rt_trail_len: entries held (<= TG_TRAIL_MAX_ENTRIES). */
uint32_t rt_trail_len(const struct rt_trail *trail);

/* rt_trail_total: attempts added since init. */
uint64_t rt_trail_total(const struct rt_trail *trail);

/* rt_trail_get: entry i (0 = oldest held), borrowed from the trail, or NULL when i >= len. */
const struct proto_attempt *rt_trail_get(const struct rt_trail *trail, uint32_t i);

/* rt_trail_last: newest entry or NULL when empty. Borrowed. */
const struct proto_attempt *rt_trail_last(const struct rt_trail *trail);

/* rt_trail_copy_out: copy the held entries oldest first into out (an event's trail array) and
 * set *n_out. Value copies. */
void rt_trail_copy_out(const struct rt_trail *trail, struct proto_attempt out[TG_TRAIL_MAX_ENTRIES],
                       uint32_t *n_out);

#endif
