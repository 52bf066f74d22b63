#include "tg_time.h"

#include <errno.h>
#include <time.h>

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This thread's latest monotonic reading, and whether it runs a loop that ticks. */
static __thread uint64_t tl_mono_ns;
static __thread int tl_loop;

uint64_t tg_now_mono_ns(void)
{
    uint64_t t = clock_ns(CLOCK_MONOTONIC);

    tl_mono_ns = t;
    return t;
}

uint64_t tg_now_mono_us(void)
{
    return tg_now_mono_ns() / 1000ull;
}

uint64_t tg_now_mono_ms(void)
{
    return tg_now_mono_ns() / 1000000ull;
}

void tg_loop_tick(void)
{
    tl_loop = 1;
    tl_mono_ns = clock_ns(CLOCK_MONOTONIC);
}

/* loop_ns: the latest reading on a ticking thread, the clock on any other. */
static uint64_t loop_ns(void)
{
    return tl_loop ? tl_mono_ns : tg_now_mono_ns();
}

uint64_t tg_loop_mono_us(void)
{
    return loop_ns() / 1000ull;
}

uint64_t tg_loop_mono_ms(void)
{
    return loop_ns() / 1000000ull;
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
