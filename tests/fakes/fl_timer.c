#include "fl_timer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tg_err.h"
#include "tg_time.h"

struct fl_timer_entry {
    uint64_t due_ms; /* monotonic ms */
    uint64_t seq;    /* insertion order, breaks ties so equal deadlines fire in order */
    void *arg;       /* borrowed */
};

struct fl_timer {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    pthread_t thread;
    fl_timer_fire_fn fire;
    struct fl_timer_entry *heap; /* min-heap on (due_ms, seq) */
    size_t len;                  /* entries in heap */
    size_t cap;                  /* fixed at creation */
    uint64_t seq;
    uint64_t full; /* adds refused */
    int stop;
    int joined; /* the thread was (or is being) joined */
};

static int entry_less(const struct fl_timer_entry *a, const struct fl_timer_entry *b)
{
    if (a->due_ms != b->due_ms)
        return a->due_ms < b->due_ms;
    return a->seq < b->seq;
}

static void heap_swap(struct fl_timer *t, size_t i, size_t j)
{
    struct fl_timer_entry tmp = t->heap[i];
    t->heap[i] = t->heap[j];
    t->heap[j] = tmp;
}

static void heap_pop(struct fl_timer *t)
{
    size_t i = 0;

    t->len--;
    if (t->len == 0)
        return;
    t->heap[0] = t->heap[t->len];
    for (;;) {
        size_t l = 2 * i + 1;
        size_t r = l + 1;
        size_t m = i;
        if (l < t->len && entry_less(&t->heap[l], &t->heap[m]))
            m = l;
        if (r < t->len && entry_less(&t->heap[r], &t->heap[m]))
            m = r;
        if (m == i)
            break;
        heap_swap(t, i, m);
        i = m;
    }
}

static void *timer_main(void *cls)
{
    struct fl_timer *t = cls;

    pthread_mutex_lock(&t->lock);
    for (;;) {
        if (t->len == 0) {
            if (t->stop)
                break;
            pthread_cond_wait(&t->cond, &t->lock);
            continue;
        }
        uint64_t now = tg_now_mono_ms();
        if (!t->stop && t->heap[0].due_ms > now) {
            struct timespec ts;
            tg_mono_deadline(t->heap[0].due_ms - now, &ts);
            pthread_cond_timedwait(&t->cond, &t->lock, &ts);
            continue;
        }
        void *arg = t->heap[0].arg;
        heap_pop(t);
        pthread_mutex_unlock(&t->lock);
        t->fire(arg);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

struct fl_timer *fl_timer_create(size_t capacity, fl_timer_fire_fn fire, char *err, size_t errlen)
{
    struct fl_timer *t = NULL;
    pthread_condattr_t ca;
    int ca_init = 0;

    if (capacity == 0 || fire == NULL) {
        snprintf(err, errlen, "timer: capacity and callback are required");
        goto fail;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        goto nomem;
    t->heap = calloc(capacity, sizeof(*t->heap));
    if (t->heap == NULL)
        goto nomem;
    t->cap = capacity;
    t->fire = fire;
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_init(&ca);
    ca_init = 1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cond, &ca);
    pthread_condattr_destroy(&ca);
    ca_init = 0;
    if (pthread_create(&t->thread, NULL, timer_main, t) != 0) {
        snprintf(err, errlen, "timer: cannot start thread");
        pthread_cond_destroy(&t->cond);
        pthread_mutex_destroy(&t->lock);
        goto fail;
    }
    return t;

nomem:
    snprintf(err, errlen, "timer: out of memory");
fail:
    if (ca_init)
        pthread_condattr_destroy(&ca);
    if (t != NULL)
        free(t->heap);
    free(t);
    return NULL;
}

int fl_timer_add(struct fl_timer *t, void *arg, uint64_t due_ms)
{
    int rc = 0;

    pthread_mutex_lock(&t->lock);
    if (t->stop) {
        rc = TG_ECLOSED;
        goto out;
    }
    if (t->len == t->cap) {
        t->full++;
        rc = TG_EFULL;
        goto out;
    }
    size_t i = t->len++;
    t->heap[i].due_ms = due_ms;
    t->heap[i].seq = t->seq++;
    t->heap[i].arg = arg;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!entry_less(&t->heap[i], &t->heap[p]))
            break;
        heap_swap(t, i, p);
        i = p;
    }
    if (i == 0)
        pthread_cond_signal(&t->cond);
out:
    pthread_mutex_unlock(&t->lock);
    return rc;
}

uint64_t fl_timer_full_count(struct fl_timer *t)
{
    uint64_t n;

    pthread_mutex_lock(&t->lock);
    n = t->full;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void fl_timer_stop(struct fl_timer *t)
{
    int join;

    pthread_mutex_lock(&t->lock);
    join = !t->joined;
    t->stop = 1;
    t->joined = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    if (join)
        pthread_join(t->thread, NULL);
}

void fl_timer_destroy(struct fl_timer **tp)
{
    struct fl_timer *t;

    if (tp == NULL || *tp == NULL)
        return;
    t = *tp;
    *tp = NULL;
    fl_timer_stop(t);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    free(t->heap);
    free(t);
}
