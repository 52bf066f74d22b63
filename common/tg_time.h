/* tg_time: clocks. Monotonic for durations and deadlines, epoch for timestamps. */
#ifndef TG_TIME_H
#define TG_TIME_H

#include <stdint.h>

/* Monotonic clock in milliseconds / microseconds / nanoseconds. Any thread. */
uint64_t tg_now_mono_ms(void);
uint64_t tg_now_mono_us(void);
uint64_t tg_now_mono_ns(void);

/* Loop clocks. A thread that runs an event loop calls tg_loop_tick() each time its wait
 * returns; on such a thread tg_loop_mono_ms/us give the time of its latest monotonic reading
 * (that tick, or a tg_now_mono_* since: they refresh it) without reading the clock. For timers,
 * deadlines, rate windows, cooldowns and idle or last-byte stamps, which need no more (durations
 * that are reported, such as latencies, read the clock): a clock read costs ~30 ns on a
 * virtual machine and the request path took a dozen per request (nginx reads the clock once a
 * wake-up, the same way). The value is never behind a reading this thread made before, so a
 * duration from a stamp taken earlier on the thread is never negative; it is behind the true
 * time by at most what the thread did since its last reading (a deadline fires that much early
 * or late). On a thread that never ticked they read the clock. */
void tg_loop_tick(void);
uint64_t tg_loop_mono_ms(void);
uint64_t tg_loop_mono_us(void);

/* Wall clock, milliseconds since the Unix epoch. Any thread. */
uint64_t tg_now_epoch_ms(void);

/* tg_mono_deadline: the CLOCK_MONOTONIC time ms milliseconds from now into *ts, for
 * pthread_cond_timedwait on a condition variable set to that clock. Any thread. */
struct timespec;
void tg_mono_deadline(uint64_t ms, struct timespec *ts);

/* Sleep for ms milliseconds (restarts on EINTR). */
void tg_sleep_ms(uint64_t ms);

#endif
