#include "health.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "tg_log.h"

struct dep {
    char name[RT_HEALTH_NAME_CAP];
    int required;
    _Atomic int state; /* enum rt_dep_state */
    char reason[RT_HEALTH_REASON_CAP]; /* JSON-safe; under rt_health.mu */
};

struct rt_health {
    _Atomic int ready;
    _Atomic int shutting_down;
    _Atomic int ndeps; /* published after the entry is filled */
    struct dep deps[RT_HEALTH_DEPS_MAX];
    pthread_mutex_t mu; /* the reasons */
};

static const char *const state_names[] = {"unknown", "up", "down"};

struct rt_health *rt_health_create(void)
{
    struct rt_health *h = calloc(1, sizeof(struct rt_health));

    if (h != NULL)
        pthread_mutex_init(&h->mu, NULL);
    return h;
}

void rt_health_destroy(struct rt_health **h)
{
    if (h == NULL || *h == NULL)
        return;
    pthread_mutex_destroy(&(*h)->mu);
    free(*h);
    *h = NULL;
}

void rt_health_set_ready(struct rt_health *h, int ready)
{
    atomic_store(&h->ready, ready ? 1 : 0);
}

void rt_health_set_shutting_down(struct rt_health *h)
{
    atomic_store(&h->shutting_down, 1);
    atomic_store(&h->ready, 0);
}

int rt_health_dep_register(struct rt_health *h, const char *name, int required)
{
    int n = atomic_load(&h->ndeps);

    if (n >= RT_HEALTH_DEPS_MAX)
        return -1;
    snprintf(h->deps[n].name, sizeof(h->deps[n].name), "%s", name);
    h->deps[n].required = required;
    atomic_store(&h->deps[n].state, RT_DEP_UNKNOWN);
    atomic_store(&h->ndeps, n + 1);
    return n;
}

void rt_health_dep_set(struct rt_health *h, int idx, enum rt_dep_state st)
{
    if (idx < 0 || idx >= atomic_load(&h->ndeps))
        return;
    atomic_store(&h->deps[idx].state, (int)st);
}

void rt_health_dep_reason(struct rt_health *h, int idx, const char *reason)
{
    if (idx < 0 || idx >= atomic_load(&h->ndeps))
        return;
    pthread_mutex_lock(&h->mu);
    tg_log_json_plain(h->deps[idx].reason, sizeof(h->deps[idx].reason),
                      reason != NULL ? reason : "");
    pthread_mutex_unlock(&h->mu);
}

int rt_health_ready(const struct rt_health *h)
{
    struct rt_health *m = (struct rt_health *)h;
    int n = atomic_load(&m->ndeps);

    if (!atomic_load(&m->ready) || atomic_load(&m->shutting_down))
        return 0;
    for (int i = 0; i < n; i++) {
        if (m->deps[i].required && atomic_load(&m->deps[i].state) != RT_DEP_UP)
            return 0;
    }
    return 1;
}

void rt_health_readiness_json(const struct rt_health *h, struct tg_buf *b)
{
    struct rt_health *m = (struct rt_health *)h;
    int n = atomic_load(&m->ndeps);
    int shown = 0;

    tg_buf_printf(b, "{\"status\":\"%s\",\"config\":\"loaded\",\"shutting_down\":%s,"
                     "\"dependencies\":{",
                  rt_health_ready(h) ? "ready" : "not_ready",
                  atomic_load(&m->shutting_down) ? "true" : "false");
    for (int i = 0; i < n; i++) {
        int st = atomic_load(&m->deps[i].state);

        if (st < 0 || st > 2)
            st = 0;
        /* names are set by the code, never by a client: no escaping needed */
        tg_buf_printf(b, "%s\"%s\":\"%s\"", i > 0 ? "," : "", m->deps[i].name, state_names[st]);
    }
    tg_buf_puts(b, "}");
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < n; i++) {
        if (atomic_load(&m->deps[i].state) != RT_DEP_DOWN || m->deps[i].reason[0] == '\0')
            continue;
        tg_buf_printf(b, "%s\"%s\":\"%s\"", shown++ == 0 ? ",\"reasons\":{" : ",",
                      m->deps[i].name, m->deps[i].reason);
    }
    pthread_mutex_unlock(&m->mu);
    tg_buf_puts(b, shown > 0 ? "}}" : "}");
}
