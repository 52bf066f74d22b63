/* tg_ids unit tests: SHA-256 known vectors, UUID v4/v7 format, ordering and uniqueness, parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tg_err.h"
#include "tg_ids.h"

#define UUIDS_N 100000

static void test_sha256_known_vectors(void **state)
{
    char hex[TG_SHA256_HEX_LEN + 1];
    char *million;

    (void)state;
    tg_sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    tg_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    tg_sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    million = malloc(1000000);
    assert_non_null(million);
    memset(million, 'a', 1000000);
    tg_sha256_hex(million, 1000000, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    assert_int_equal(strlen(hex), TG_SHA256_HEX_LEN);
}

static void assert_uuid_shape(const char *u, char version)
{
    assert_int_equal(strlen(u), TG_UUID_STR_LEN);
    for (int i = 0; i < TG_UUID_STR_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(u[i], '-');
        else
            assert_non_null(strchr("0123456789abcdef", u[i]));
    }
    assert_int_equal(u[14], version);
    assert_non_null(strchr("89ab", u[19])); /* RFC 9562 variant 10xx */
    assert_true(tg_uuid_valid(u));
}

static int cmp_uuid(const void *a, const void *b)
{
    return memcmp(a, b, TG_UUID_STR_LEN + 1);
}

static void test_uuid_v4_format_and_uniqueness(void **state)
{
    char(*ids)[TG_UUID_STR_LEN + 1] = malloc(UUIDS_N * sizeof(*ids));

    (void)state;
    assert_non_null(ids);
    for (int i = 0; i < UUIDS_N; i++) {
        assert_int_equal(tg_uuid_v4(ids[i]), 0);
        assert_uuid_shape(ids[i], '4');
    }
    qsort(ids, UUIDS_N, sizeof(*ids), cmp_uuid);
    for (int i = 1; i < UUIDS_N; i++)
        assert_true(memcmp(ids[i - 1], ids[i], TG_UUID_STR_LEN) != 0);
    free(ids);
}

static void test_uuid_v7_format_time_prefix_and_uniqueness(void **state)
{
    char(*ids)[TG_UUID_STR_LEN + 1] = malloc(UUIDS_N * sizeof(*ids));
    const uint64_t ms = 0x0190b3e27c1aull;

    (void)state;
    assert_non_null(ids);
    /* all in the same millisecond: only the random bits tell them apart */
    for (int i = 0; i < UUIDS_N; i++) {
        assert_int_equal(tg_uuid_v7(ms, ids[i]), 0);
        assert_uuid_shape(ids[i], '7');
        assert_memory_equal(ids[i], "0190b3e2-7c1a", 13);
    }
    qsort(ids, UUIDS_N, sizeof(*ids), cmp_uuid);
    for (int i = 1; i < UUIDS_N; i++)
        assert_true(memcmp(ids[i - 1], ids[i], TG_UUID_STR_LEN) != 0);
    /* later milliseconds sort later */
    assert_int_equal(tg_uuid_v7(ms + 1, ids[0]), 0);
    assert_int_equal(tg_uuid_v7(ms + 1000, ids[1]), 0);
    assert_true(strcmp(ids[0], ids[1]) < 0);
    free(ids);
}

static void test_uuid_valid_rejects(void **state)
{
    (void)state;
    assert_true(tg_uuid_valid("0190b3e2-7c1a-7b3e-8f00-123456789abc"));
    assert_true(tg_uuid_valid("0190B3E2-7C1A-7B3E-8F00-123456789ABC")); /* case-insensitive */
    assert_false(tg_uuid_valid(""));
    assert_false(tg_uuid_valid("0190b3e2-7c1a-7b3e-8f00-123456789ab"));   /* short */
    assert_false(tg_uuid_valid("0190b3e2-7c1a-7b3e-8f00-123456789abcd")); /* long */
    assert_false(tg_uuid_valid("0190b3e2x7c1a-7b3e-8f00-123456789abc"));  /* dash */
    assert_false(tg_uuid_valid("0190b3e2-7c1a-7b3e-8f00-123456789abg"));  /* hex */
    assert_false(tg_uuid_valid("0190b3e27c1a7b3e8f00123456789abc"));      /* no dashes */
}

static void test_uuid_parse(void **state)
{
    static const unsigned char want[16] = {0x01, 0x90, 0xb3, 0xe2, 0x7c, 0x1a, 0x7b, 0x3e,
                                           0x8f, 0x00, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc};
    unsigned char u[16];

    (void)state;
    assert_int_equal(tg_uuid_parse("0190b3e2-7c1a-7b3e-8f00-123456789abc", u), 0);
    assert_memory_equal(u, want, 16);
    memset(u, 0, sizeof(u));
    assert_int_equal(tg_uuid_parse("0190B3E2-7C1A-7B3E-8F00-123456789ABC", u), 0);
    assert_memory_equal(u, want, 16);
    memset(u, 0x55, sizeof(u));
    assert_int_equal(tg_uuid_parse("0190b3e2-7c1a-7b3e-8f00-123456789abg", u), TG_EINVAL);
    assert_int_equal(tg_uuid_parse("0190b3e27c1a7b3e8f00123456789abc", u), TG_EINVAL);
    assert_int_equal(tg_uuid_parse("0190b3e2-7c1a-7b3e-8f00-123456789abcd", u), TG_EINVAL);
    assert_int_equal(u[0], 0x55); /* untouched on error */
}

static void test_random_bytes(void **state)
{
    unsigned char a[32];
    unsigned char b[32];

    (void)state;
    assert_int_equal(tg_random_bytes(a, sizeof(a)), 0);
    assert_int_equal(tg_random_bytes(b, sizeof(b)), 0);
    assert_memory_not_equal(a, b, sizeof(a));
    assert_int_equal(tg_random_bytes(a, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known_vectors),
        cmocka_unit_test(test_uuid_v4_format_and_uniqueness),
        cmocka_unit_test(test_uuid_v7_format_time_prefix_and_uniqueness),
        cmocka_unit_test(test_uuid_valid_rejects),
        cmocka_unit_test(test_uuid_parse),
        cmocka_unit_test(test_random_bytes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
