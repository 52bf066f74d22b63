/* tg_hash unit tests: the published FNV-1a 64-bit vectors, and that a hash continued over two
 * pieces equals the hash of the whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offset_basis),
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_bytes_not_strings),
        cmocka_unit_test(test_incremental),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
