/* tg_blocks: a per-thread cache of freed blocks of a few fixed sizes, for the objects every
 * request allocates and frees that are too large for malloc's own per-thread cache (glibc's
 * tcache stops at 1 KiB: a larger block goes through the arena's bins, and a request for one
 * consolidates the fast bins), or that many requests hold at once (tcache keeps 7 a size: the
 * heads of a loop run's responses, held together until their events are in the spool, would
 * overflow it). A thread keeps at most TG_BLOCKS_KEEP blocks of each class (sized for a loop
 * run's completions at 64 connections a thread: at most 64 x ~12 KiB = 0.8 MiB a thread);
 * past that a block goes back to malloc. What a thread keeps is freed when it exits.
 *
 * A block from tg_blocks_get is uninitialised, like malloc's; a block may be put back on
 * another thread than the one that got it (it joins that thread's cache). */
#ifndef TG_BLOCKS_H
#define TG_BLOCKS_H

#include <stddef.h>

enum tg_block_class {
    TG_BLOCK_CALL = 0, /* router-svc: struct rt_call */
    TG_BLOCK_RESPONSE, /* router-svc: struct hs_response */
    TG_BLOCK_HEAD,     /* router-svc: a request's head and its table, when they fit one */
    TG_BLOCK_BODY,     /* router-svc: a short buffered response body */
    TG_BLOCK_CLASSES
};

#define TG_BLOCKS_KEEP 64u  /* blocks of a class a thread keeps */

/* tg_blocks_get: a block of size bytes (the same size every time for a class), or NULL when
 * malloc has none. */
void *tg_blocks_get(enum tg_block_class cls, size_t size);

/* tg_blocks_put: give back a block of cls from tg_blocks_get (or malloc) of size bytes (NULL is
 * ignored). */
void tg_blocks_put(enum tg_block_class cls, void *p, size_t size);

/* tg_blocks_kept: blocks the calling thread keeps now, all classes (for tests). */
unsigned tg_blocks_kept(void);

#endif
