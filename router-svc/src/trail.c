#include "trail.h"

#include <string.h>

#include "mask.h"

void rt_trail_init(struct rt_trail *trail)
{
    /* The ring is not cleared (1.6 KiB a request): an entry is written whole when added, and
     * only entries below len are read. Debug builds fill it with garbage so that a read of
     * one never added cannot pass for an empty entry. */
#ifndef NDEBUG
    memset(trail->ring, 0xA5, sizeof(trail->ring));
#endif
    trail->head = 0;
    trail->len = 0;
    trail->total = 0;
}

/* Copy src into a fixed field, cut at a UTF-8 character boundary. */
static void field_set(char *dst, size_t cap, const char *src)
{
    size_t n;

    if (src == NULL) {
        dst[0] = '\0';
        return;
    }
    n = strnlen(src, cap);
    if (n >= cap) {
        n = cap - 1;
        /* Step back over continuation bytes so no character is split. */
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void rt_trail_add(struct rt_trail *trail, const struct rt_mask *mask, const char *group,
                  const char *deployment_id, int32_t http_status, const char *error_class,
                  uint32_t latency_ms, const char *message, size_t msglen)
{
    struct proto_attempt *a;

    if (trail->len < TG_TRAIL_MAX_ENTRIES) {
        a = &trail->ring[(trail->head + trail->len) % TG_TRAIL_MAX_ENTRIES];
        trail->len++;
    } else {
        /* Full: the oldest entry is overwritten and the next one becomes the oldest. */
        a = &trail->ring[trail->head];
        trail->head = (trail->head + 1) % TG_TRAIL_MAX_ENTRIES;
    }
    memset(a, 0, sizeof(*a));
    field_set(a->group, sizeof(a->group), group);
    field_set(a->deployment_id, sizeof(a->deployment_id), deployment_id);
    field_set(a->error_class, sizeof(a->error_class), error_class);
    a->http_status = http_status;
    a->latency_ms = latency_ms;
    rt_mask_apply(mask, message, message == NULL ? 0 : msglen, a->message, sizeof(a->message));
    trail->total++;
}

uint32_t rt_trail_len(const struct rt_trail *trail)
{
    return trail->len;
}

uint64_t rt_trail_total(const struct rt_trail *trail)
{
    return trail->total;
}

const struct proto_attempt *rt_trail_get(const struct rt_trail *trail, uint32_t i)
{
    if (i >= trail->len)
        return NULL;
    return &trail->ring[(trail->head + i) % TG_TRAIL_MAX_ENTRIES];
}

const struct proto_attempt *rt_trail_last(const struct rt_trail *trail)
{
    if (trail->len == 0)
        return NULL;
    return rt_trail_get(trail, trail->len - 1);
}

void rt_trail_copy_out(const struct rt_trail *trail, struct proto_attempt out[TG_TRAIL_MAX_ENTRIES],
                       uint32_t *n_out)
{
    for (uint32_t i = 0; i < trail->len; i++)
        out[i] = *rt_trail_get(trail, i);
    *n_out = trail->len;
}
