/* alert_bucket: a token bucket, the per-webhook rate limit of the alerter.
 *
 * Starts full (burst tokens), refills at rate tokens per second up to burst, one token per
 * POST. Over any interval of T seconds from creation at most burst + T x rate tokens are
 * taken. Time is an argument (monotonic ms): no clock, no I/O, no lock (the caller's lock
 * protects it). */
#ifndef SP_ALERT_BUCKET_H
#define SP_ALERT_BUCKET_H

#include <stdint.h>

struct sp_token_bucket {
    double tokens;    /* available now (fractional while refilling) */
    double rate;      /* tokens per second, > 0 */
    double burst;     /* capacity, >= 1 */
    uint64_t last_ms; /* time of the last refill, monotonic ms */
};

/* sp_token_bucket_init: full bucket at now_ms. rate <= 0 is taken as 1, burst < 1 as 1.
 * Caller storage. */
void sp_token_bucket_init(struct sp_token_bucket *tb, double rate, double burst, uint64_t now_ms);

/* sp_token_bucket_take: refill to now_ms, then take one token. Returns 1 when taken, 0 when
 * none is available (nothing changes but the refill). A clock going backwards refills nothing. */
int sp_token_bucket_take(struct sp_token_bucket *tb, uint64_t now_ms);

/* sp_token_bucket_wait_ms: milliseconds from now_ms until a token is available (0 = now),
 * rounded up. Does not take. */
uint64_t sp_token_bucket_wait_ms(struct sp_token_bucket *tb, uint64_t now_ms);

#endif
