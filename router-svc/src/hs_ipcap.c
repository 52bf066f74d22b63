/* hs_ipcap: open connections per source address, for several servers (hsrv.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "hsrv_int.h"

struct hs_ipcap_slot {
    uint32_t addr;  /* network order */
    uint32_t count; /* open connections; 0: the slot is free */
};

struct hs_ipcap {
    pthread_mutex_t mu;
    unsigned per_addr; /* connections per address, at most */
    unsigned cap;      /* addresses held at most (the connection cap: one each at worst) */
    unsigned used;
    size_t mask; /* slots - 1; slots is a power of two >= 2 * cap */
    struct hs_ipcap_slot slot[];
};

struct hs_ipcap *hs_ipcap_create(unsigned per_addr, unsigned capacity)
{
    size_t n = 16;
    struct hs_ipcap *t;

    if (per_addr == 0 || capacity == 0)
        return NULL;
    while (n < (size_t)capacity * 2)
        n *= 2;
    t = calloc(1, sizeof(*t) + n * sizeof(t->slot[0]));
    if (t == NULL)
        return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->per_addr = per_addr;
    t->cap = capacity;
    t->mask = n - 1;
    return t;
}

void hs_ipcap_destroy(struct hs_ipcap **tp)
{
    if (tp == NULL || *tp == NULL)
        return;
    pthread_mutex_destroy(&(*tp)->mu);
    free(*tp);
    *tp = NULL;
}

static size_t ipcap_home(const struct hs_ipcap *t, uint32_t addr)
{
    return (size_t)((addr * 2654435761u) >> 7) & t->mask;
}

int hs_ipcap_acquire(struct hs_ipcap *t, uint32_t addr)
{
    size_t i;
    int rc = -1;

    pthread_mutex_lock(&t->mu);
    for (i = ipcap_home(t, addr); t->slot[i].count > 0; i = (i + 1) & t->mask) {
        if (t->slot[i].addr == addr) {
            if (t->slot[i].count < t->per_addr) {
                t->slot[i].count++;
                rc = 0;
            }
            goto out;
        }
    }
    if (t->used < t->cap) {
        t->slot[i].addr = addr;
        t->slot[i].count = 1;
        t->used++;
        rc = 0;
    }
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void hs_ipcap_release(struct hs_ipcap *t, uint32_t addr)
{
    size_t i, j;

    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    for (i = ipcap_home(t, addr); t->slot[i].count > 0; i = (i + 1) & t->mask) {
        if (t->slot[i].addr != addr)
            continue;
        if (--t->slot[i].count > 0)
            goto out;
        /* the address's last connection: delete with backward shift (linear probing) */
        t->used--;
        j = i;
        for (;;) {
            size_t k;

            j = (j + 1) & t->mask;
            if (t->slot[j].count == 0)
                break;
            k = ipcap_home(t, t->slot[j].addr);
            /* slot j may move into the hole at i unless its home lies cyclically in (i, j] */
            if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
                t->slot[i] = t->slot[j];
                t->slot[j].count = 0;
                i = j;
            }
        }
        t->slot[i].count = 0;
        goto out;
    }
out:
    pthread_mutex_unlock(&t->mu);
}
