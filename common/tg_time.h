/* tg_time: clocks. Monotonic for durations and deadlines, epoch for timestamps. */
#ifndef TG_TIME_H
#define TG_TIME_H

#include <stdint.h>

/* Monotonic clock in milliseconds / microseconds / nanoseconds. Any thread. */
uint64_t tg_now_mono_ms(void);
uint64_t tg_now_mono_us(void);
uint64_t tg_now_mono_ns(void);

/* Wall clock, milliseconds since the Unix epoch. Any thread. */
uint64_t tg_now_epoch_ms(void);

/* tg_mono_deadline: the CLOCK_MONOTONIC time ms milliseconds from now into *ts, for
 * pthread_cond_timedwait on a condition variable set to that clock. Any thread. */
struct timespec;
void tg_mono_deadline(uint64_t ms, struct timespec *ts);

/* Sleep for ms milliseconds (restarts on EINTR). */
void tg_sleep_ms(uint64_t ms);

#endif
