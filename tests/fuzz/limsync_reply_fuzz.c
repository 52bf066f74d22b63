/* libFuzzer target for limsync_reply (router-svc/src/limsync_reply.h): the limit sync script's
 * answer from Redis, read by the connection's reader (tg_redis_reader_create: hiredis's, with
 * array headers bounded) and checked by rt_limsync_reply_apply.
 *
 * Input: byte 0 gives n, the subjects sent (0..RT_LIMSYNC_FUZZ_MAX); the rest is RESP bytes as
 * Redis would send them (at most the first reply is used).
 *
 * Properties (abort on violation):
 *  - the reader never lets a reply announce more than TG_REDIS_ELEMENTS_MAX elements (a header
 *    of a billion elements is refused, not allocated);
 *  - accepted: the reply is an array of 1 + 3n non-negative integers, *replicas >= 1 and equal
 *    to its first element (1 for 0), and every entry holds exactly its three counts;
 *  - refused: TG_EPROTO, a NUL-terminated reason, and no entry written (the sentinel stays). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "limsync_reply.h"
#include "tg_err.h"
#include "tg_redis.h"

#define RT_LIMSYNC_FUZZ_MAX 8
#define SENTINEL 0xA5A5A5A5A5A5A5A5ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "limsync_reply_fuzz: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rt_limiter_sync_entry e[RT_LIMSYNC_FUZZ_MAX];
    redisReader *rd;
    void *reply = NULL;
    uint32_t n, replicas = 0;
    size_t announced = 0;
    char why[160];
    int rc;

    if (size < 1)
        return 0;
    n = data[0] % (RT_LIMSYNC_FUZZ_MAX + 1);
    rd = tg_redis_reader_create(&announced);
    if (rd == NULL)
        return 0;
    if (redisReaderFeed(rd, (const char *)data + 1, size - 1) != REDIS_OK ||
        redisReaderGetReply(rd, &reply) != REDIS_OK || reply == NULL) {
        redisReaderFree(rd);
        return 0;
    }
    for (uint32_t i = 0; i < RT_LIMSYNC_FUZZ_MAX; i++) {
        e[i].remote_reqs = SENTINEL;
        e[i].remote_tokens = SENTINEL;
        e[i].remote_in_flight = SENTINEL;
    }
    memset(why, 'x', sizeof(why));
    rc = rt_limsync_reply_apply(reply, e, n, &replicas, why, sizeof(why));
    check(announced <= TG_REDIS_ELEMENTS_MAX, "more elements announced than the bound");
    if (rc == 0) {
        const redisReply *r = reply;

        check(r->type == REDIS_REPLY_ARRAY && r->elements == 1u + 3u * n, "accepted a bad shape");
        for (size_t i = 0; i < r->elements; i++)
            check(r->element[i]->type == REDIS_REPLY_INTEGER && r->element[i]->integer >= 0,
                  "accepted a non-count");
        check(replicas >= 1, "replicas below 1");
        check(r->element[0]->integer == 0 ? replicas == 1
                                          : (long long)replicas == r->element[0]->integer ||
                                                replicas == UINT32_MAX,
              "replicas differ from the answer");
        for (uint32_t i = 0; i < n; i++)
            check(e[i].remote_reqs == (uint64_t)r->element[1 + 3 * i]->integer &&
                      e[i].remote_tokens == (uint64_t)r->element[2 + 3 * i]->integer &&
                      e[i].remote_in_flight == (uint64_t)r->element[3 + 3 * i]->integer,
                  "an entry holds other counts than the answer's");
    } else {
        check(rc == TG_EPROTO, "refused with another code than TG_EPROTO");
        check(memchr(why, '\0', sizeof(why)) != NULL, "reason not terminated");
        for (uint32_t i = 0; i < RT_LIMSYNC_FUZZ_MAX; i++)
            check(e[i].remote_reqs == SENTINEL && e[i].remote_tokens == SENTINEL &&
                      e[i].remote_in_flight == SENTINEL,
                  "a refused answer wrote an entry");
    }
    for (uint32_t i = n; i < RT_LIMSYNC_FUZZ_MAX; i++)
        check(e[i].remote_reqs == SENTINEL, "wrote past the n entries");
    freeReplyObject(reply);
    redisReaderFree(rd);
    return 0;
}
