#include "tg_time.h"

#include <errno.h>
#include <time.h>

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t tg_now_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

uint64_t tg_now_mono_us(void)
{
    return clock_ns(CLOCK_MONOTONIC) / 1000ull;
}

uint64_t tg_now_mono_ms(void)
{
    return clock_ns(CLOCK_MONOTONIC) / 1000000ull;
}

uint64_t tg_now_epoch_ms(void)
{
    return clock_ns(CLOCK_REALTIME) / 1000000ull;
}

void tg_mono_deadline(uint64_t ms, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void tg_sleep_ms(uint64_t ms)
{
    struct timespec req = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    struct timespec rem;

    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}
