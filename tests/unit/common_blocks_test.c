/* tg_blocks unit tests: a block given back is the next one got (LIFO, per class), a thread
 * keeps at most TG_BLOCKS_KEEP a class and frees the rest, blocks given back on another thread
 * join that thread's cache and are freed when it exits (ASan's leak check runs on this test),
 * and under ASan a kept block is poisoned. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tg_blocks.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#define BIG 7000u

static void test_reuse_per_class(void **state)
{
    void *a, *b, *c, *d;

    (void)state;
    a = tg_blocks_get(TG_BLOCK_CALL, BIG);
    b = tg_blocks_get(TG_BLOCK_RESPONSE, 3000);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 0xab, BIG);
    memset(b, 0xcd, 3000);
    tg_blocks_put(TG_BLOCK_CALL, a, BIG);
    tg_blocks_put(TG_BLOCK_RESPONSE, b, 3000);
    assert_int_equal(tg_blocks_kept(), 2);
    c = tg_blocks_get(TG_BLOCK_RESPONSE, 3000);
    d = tg_blocks_get(TG_BLOCK_CALL, BIG);
    assert_ptr_equal(c, b); /* each class its own */
    assert_ptr_equal(d, a);
    assert_int_equal(tg_blocks_kept(), 0);
    memset(d, 0, BIG); /* the whole block is usable again */
    tg_blocks_put(TG_BLOCK_CALL, d, BIG);
    tg_blocks_put(TG_BLOCK_RESPONSE, c, 3000);
    tg_blocks_put(TG_BLOCK_CALL, NULL, BIG); /* ignored */
    assert_int_equal(tg_blocks_kept(), 2);
}

static void test_bounded(void **state)
{
    void *p[3 * TG_BLOCKS_KEEP];
    unsigned before = tg_blocks_kept();

    (void)state;
    for (unsigned i = 0; i < 3 * TG_BLOCKS_KEEP; i++) {
        p[i] = tg_blocks_get(TG_BLOCK_CALL, BIG);
        assert_non_null(p[i]);
    }
    for (unsigned i = 0; i < 3 * TG_BLOCKS_KEEP; i++)
        tg_blocks_put(TG_BLOCK_CALL, p[i], BIG);
    /* the class is full; the response class kept what it had */
    assert_true(tg_blocks_kept() <= TG_BLOCKS_KEEP + before);
    assert_true(tg_blocks_kept() >= TG_BLOCKS_KEEP);
}

struct hand {
    void *blk[4];
    unsigned kept_after;
};

/* a thread that gives back blocks another thread got, then exits: they are freed with it */
static void *giver(void *arg)
{
    struct hand *h = arg;

    for (unsigned i = 0; i < 4; i++)
        tg_blocks_put(TG_BLOCK_RESPONSE, h->blk[i], 3000);
    h->kept_after = tg_blocks_kept();
    return NULL;
}

static void test_other_thread_frees_at_exit(void **state)
{
    struct hand h;
    pthread_t t;

    (void)state;
    for (unsigned i = 0; i < 4; i++) {
        h.blk[i] = tg_blocks_get(TG_BLOCK_RESPONSE, 3000);
        assert_non_null(h.blk[i]);
    }
    assert_int_equal(pthread_create(&t, NULL, giver, &h), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(h.kept_after, 4);
}

/* Under ASan a kept block is poisoned (a use after tg_blocks_put is reported) and a block got
 * again is not. */
static void test_kept_blocks_poisoned(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    char *p = tg_blocks_get(TG_BLOCK_CALL, BIG);

    assert_non_null(p);
    tg_blocks_put(TG_BLOCK_CALL, p, BIG);
    assert_true(__asan_address_is_poisoned(p));
    assert_true(__asan_address_is_poisoned(p + BIG - 1));
    assert_ptr_equal(tg_blocks_get(TG_BLOCK_CALL, BIG), p);
    assert_false(__asan_address_is_poisoned(p));
    assert_false(__asan_address_is_poisoned(p + BIG - 1));
    tg_blocks_put(TG_BLOCK_CALL, p, BIG);
#else
    skip(); /* only an ASan build poisons */
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_per_class),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_other_thread_frees_at_exit),
        cmocka_unit_test(test_kept_blocks_poisoned),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
