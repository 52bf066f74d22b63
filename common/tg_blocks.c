#include "tg_blocks.h"

#include <pthread.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* a kept block is poisoned: a use after tg_blocks_put is reported as one after free would be */
#define KEPT(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define TAKEN(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KEPT(p, n) ((void)(p), (void)(n))
#define TAKEN(p, n) ((void)(p), (void)(n))
#endif

struct cache {
    void *blk[TG_BLOCK_CLASSES][TG_BLOCKS_KEEP];
    unsigned n[TG_BLOCK_CLASSES];
    size_t size[TG_BLOCK_CLASSES]; /* of the class's blocks */
};

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static int key_ok;
static __thread struct cache *mine; /* also the key's value: freed when the thread exits */

static void cache_free(void *p)
{
    struct cache *c = p;

    for (unsigned k = 0; k < TG_BLOCK_CLASSES; k++) {
        for (unsigned i = 0; i < c->n[k]; i++) {
            TAKEN(c->blk[k][i], c->size[k]);
            free(c->blk[k][i]);
        }
    }
    free(c);
    mine = NULL;
}

static void key_init(void)
{
    key_ok = pthread_key_create(&key, cache_free) == 0;
}

void *tg_blocks_get(enum tg_block_class cls, size_t size)
{
    struct cache *c = mine;

    if (c != NULL && c->n[cls] > 0) {
        void *p = c->blk[cls][--c->n[cls]];

        TAKEN(p, size);
        return p;
    }
    return malloc(size);
}

void tg_blocks_put(enum tg_block_class cls, void *p, size_t size)
{
    struct cache *c = mine;

    if (p == NULL)
        return;
    if (c == NULL) {
        /* the first block this thread gives back: its cache, freed at its exit */
        pthread_once(&key_once, key_init);
        if (key_ok)
            c = calloc(1, sizeof(*c));
        if (c != NULL && pthread_setspecific(key, c) != 0) {
            free(c);
            c = NULL;
        }
        if (c == NULL) {
            free(p);
            return;
        }
        mine = c;
    }
    if (c->n[cls] < TG_BLOCKS_KEEP) {
        c->size[cls] = size;
        KEPT(p, size);
        c->blk[cls][c->n[cls]++] = p;
        return;
    }
    free(p);
}

unsigned tg_blocks_kept(void)
{
    unsigned t = 0;

    if (mine != NULL) {
        for (unsigned k = 0; k < TG_BLOCK_CLASSES; k++)
            t += mine->n[k];
    }
    return t;
}
