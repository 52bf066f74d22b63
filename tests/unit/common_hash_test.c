/* tg_hash unit tests: the published FNV-1a 64-bit vectors, that a hash continued over two
 * pieces equals the hash of the whole, and the tg_names table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tg_hash.h"

static void test_offset_basis(void **state)
{
    (void)state;
    assert_true(TG_HASH_FNV1A64_INIT == 0xcbf29ce484222325ull);
    assert_true(tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, "", 0) == 0xcbf29ce484222325ull);
}

/* Vectors of the FNV reference test suite (Fowler/Noll/Vo). */
static void test_reference_vectors(void **state)
{
    (void)state;
    assert_true(tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, "foobar", 6) == 0x85944171f73967e8ull);
}

/* Bytes are hashed as unsigned (0xff is not sign-extended) and NUL counts as a byte. */
static void test_bytes_not_strings(void **state)
{
    const unsigned char b[2] = {0xff, 0x00};

    (void)state;
    assert_true(tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, b, 2) == 0x0a99a607b6f60beaull);
    assert_true(tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, b, 2) !=
                tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, b, 1));
}

static void test_incremental(void **state)
{
    const char *s = "key-hash\0team\0model-group";
    const size_t n = 25;

    (void)state;
    for (size_t cut = 0; cut <= n; cut++) {
        uint64_t h = tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, s, cut);
        h = tg_hash_fnv1a64(h, s + cut, n - cut);
        assert_true(h == tg_hash_fnv1a64(TG_HASH_FNV1A64_INIT, s, n));
    }
}

/* Every name added is found with its value, a name never added is not (one byte off, a prefix,
 * a longer one, the empty name), and the first mapping of a name stays. 1,000 names in a table
 * of 2,048 slots: probes run past each other and wrap around the end. */
static void test_names(void **state)
{
    static char names[1000][16];
    struct tg_names *t = tg_names_create(1000);
    int v = -7;

    (void)state;
    assert_non_null(t);
    for (int i = 0; i < 1000; i++) {
        snprintf(names[i], sizeof(names[i]), "group-%d", i);
        assert_int_equal(tg_names_add(t, names[i], i), 0);
    }
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(tg_names_find(t, names[i], &v), 1);
        assert_int_equal(v, i);
    }
    /* names that differ only in their last bytes are spread: no lookup reads more than a few
     * slots (a hash whose last bytes never reached the slot's bits put them all in one run) */
    assert_true(tg_names_longest_probe(t) <= 16);
    v = -7;
    assert_int_equal(tg_names_find(t, "group-1000", &v), 0);
    assert_int_equal(tg_names_find(t, "group-", &v), 0);
    assert_int_equal(tg_names_find(t, "group-9990", &v), 0);
    assert_int_equal(tg_names_find(t, "group-99x", &v), 0);
    assert_int_equal(tg_names_find(t, "", &v), 0);
    assert_int_equal(tg_names_find(t, NULL, &v), 0);
    assert_int_equal(v, -7);
    /* a second mapping of a name is not taken; a copy of the name finds the first */
    assert_int_equal(tg_names_add(t, "group-5", 55), 1);
    assert_int_equal(tg_names_find(t, "group-5", &v), 1);
    assert_int_equal(v, 5);
    /* full at max: nothing more is added, and what is there is still found */
    assert_int_equal(tg_names_add(t, "one-more", 1), -1);
    assert_int_equal(tg_names_find(t, "one-more", &v), 0);
    assert_int_equal(tg_names_find(t, names[999], &v), 1);
    assert_int_equal(v, 999);
    tg_names_destroy(&t);
    assert_null(t);
    assert_int_equal(tg_names_find(NULL, "group-1", &v), 0);
}

/* The smallest table (four slots for two names): the empty name is a name like another. */
static void test_names_small(void **state)
{
    struct tg_names *t = tg_names_create(2);
    int v = 0;

    (void)state;
    assert_non_null(t);
    assert_int_equal(tg_names_add(t, "", 3), 0);
    assert_int_equal(tg_names_add(t, "b", 4), 0);
    assert_int_equal(tg_names_add(t, "c", 5), -1);
    assert_int_equal(tg_names_find(t, "", &v), 1);
    assert_int_equal(v, 3);
    assert_int_equal(tg_names_find(t, "b", &v), 1);
    assert_int_equal(v, 4);
    assert_int_equal(tg_names_find(t, "c", &v), 0);
    tg_names_destroy(&t);
}

/* Names of every length from 0 to 24 bytes (the hash reads eight bytes a step and the tail
 * apart): each is found, and the same name with its last byte changed or one byte shorter is
 * not, in a table past the size where a lookup compares with each name in turn, and at it. */
static void test_names_lengths(void **state)
{
    static const char src[] = "abcdefghijklmnopqrstuvwxyz";
    char names[25][32], probe[32];

    (void)state;
    for (size_t len = 0; len <= 24; len++) {
        memcpy(names[len], src, len);
        names[len][len] = '\0';
    }
    for (size_t cap = 4; cap <= 25; cap += 21) { /* 4: one compare per name; 25: the hash */
        struct tg_names *t = tg_names_create(cap);
        size_t first = 25 - cap;
        int v = -1;

        assert_non_null(t);
        for (size_t len = first; len <= 24; len++)
            assert_int_equal(tg_names_add(t, names[len], (int)len), 0);
        for (size_t len = first; len <= 24; len++) {
            assert_int_equal(tg_names_find(t, names[len], &v), 1);
            assert_int_equal(v, (int)len);
            if (len == 0)
                continue;
            memcpy(probe, names[len], len + 1);
            probe[len - 1] = 'Z';
            assert_int_equal(tg_names_find(t, probe, &v), 0);
            if (len - 1 < first) {
                probe[len - 1] = '\0';
                assert_int_equal(tg_names_find(t, probe, &v), 0);
            }
        }
        tg_names_destroy(&t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offset_basis),
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_bytes_not_strings),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_names_small),
        cmocka_unit_test(test_names_lengths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
