/* fl_timer: a bounded min-heap of deadlines served by one thread.
 *
 * fake-llm uses it to delay responses without holding an HTTP worker thread: a handler suspends
 * its connection, adds a deadline here, and the timer thread calls the fire callback (which
 * resumes the connection) when the deadline passes. The heap capacity is fixed at creation;
 * adding to a full heap fails with TG_EFULL and is counted. */
#ifndef FL_TIMER_H
#define FL_TIMER_H

#include <stddef.h>
#include <stdint.h>

struct fl_timer;

/* Called on the timer thread, without the timer lock held, once per added entry. */
typedef void (*fl_timer_fire_fn)(void *arg);

/* fl_timer_create: start the timer thread with room for capacity pending entries (> 0).
 * Returns a new handle (destroy with fl_timer_destroy) or NULL with err filled. */
struct fl_timer *fl_timer_create(size_t capacity, fl_timer_fire_fn fire, char *err, size_t errlen);

/* fl_timer_add: call fire(arg) at monotonic time due_ms (now or earlier: as soon as possible).
 * arg is borrowed and must stay valid until fired. Returns 0, TG_EFULL when the heap is full
 * (counted; the entry is not added) or TG_ECLOSED once destroy has begun. Any thread. */
int fl_timer_add(struct fl_timer *t, void *arg, uint64_t due_ms);

/* fl_timer_full_count: how many adds were refused because the heap was full. Any thread. */
uint64_t fl_timer_full_count(struct fl_timer *t);

/* fl_timer_stop: fire every pending entry now, stop the thread; later adds get TG_ECLOSED.
 * Idempotent. Must not be called from the fire callback. */
void fl_timer_stop(struct fl_timer *t);

/* fl_timer_destroy: stop (as fl_timer_stop), free, set *t NULL. Accepts NULL.
 * Must not be called from the fire callback. */
void fl_timer_destroy(struct fl_timer **t);

#endif
