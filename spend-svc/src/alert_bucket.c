#include "alert_bucket.h"

#include <math.h>

void sp_token_bucket_init(struct sp_token_bucket *tb, double rate, double burst, uint64_t now_ms)
{
    tb->rate = rate > 0 ? rate : 1.0;
    tb->burst = burst >= 1 ? burst : 1.0;
    tb->tokens = tb->burst;
    tb->last_ms = now_ms;
}

static void bucket_refill(struct sp_token_bucket *tb, uint64_t now_ms)
{
    if (now_ms <= tb->last_ms)
        return;
    tb->tokens += (double)(now_ms - tb->last_ms) * tb->rate / 1000.0;
    if (tb->tokens > tb->burst)
        tb->tokens = tb->burst;
    tb->last_ms = now_ms;
}

int sp_token_bucket_take(struct sp_token_bucket *tb, uint64_t now_ms)
{
    bucket_refill(tb, now_ms);
    if (tb->tokens < 1.0)
        return 0;
    tb->tokens -= 1.0;
    return 1;
}

uint64_t sp_token_bucket_wait_ms(struct sp_token_bucket *tb, uint64_t now_ms)
{
    double missing;

    bucket_refill(tb, now_ms);
    if (tb->tokens >= 1.0)
        return 0;
    missing = 1.0 - tb->tokens;
    return (uint64_t)ceil(missing * 1000.0 / tb->rate);
}
