/* tg_crc32c unit tests: published check values and agreement with a bitwise reference, and of
 * the CPU instruction's path with the tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tg_crc32c.h"

/* Bit-at-a-time CRC-32C (reflected polynomial 0x82F63B78): slow and obviously right. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xffffffffu;

    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static void test_check_value(void **state)
{
    (void)state;
    assert_int_equal(tg_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(tg_crc32c(0, "", 0), 0);
}

/* RFC 3720 (iSCSI) appendix B.4 vectors. */
static void test_rfc3720_vectors(void **state)
{
    unsigned char buf[32];

    (void)state;
    memset(buf, 0, sizeof(buf));
    assert_int_equal(tg_crc32c(0, buf, sizeof(buf)), 0x8A9136AAu);
    memset(buf, 0xff, sizeof(buf));
    assert_int_equal(tg_crc32c(0, buf, sizeof(buf)), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(tg_crc32c(0, buf, sizeof(buf)), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    assert_int_equal(tg_crc32c(0, buf, sizeof(buf)), 0x113FDB5Cu);
}

static void test_matches_bitwise_and_is_incremental(void **state)
{
    unsigned char buf[1000];

    (void)state;
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    /* every length around the 8-byte stride, and every offset (alignment) */
    for (size_t off = 0; off < 8; off++) {
        for (size_t n = 0; n + off <= 64; n++)
            assert_int_equal(tg_crc32c(0, buf + off, n), crc32c_bitwise(buf + off, n));
    }
    assert_int_equal(tg_crc32c(0, buf, sizeof(buf)), crc32c_bitwise(buf, sizeof(buf)));
    for (size_t cut = 0; cut <= sizeof(buf); cut += 37) {
        uint32_t c = tg_crc32c(0, buf, cut);
        assert_int_equal(tg_crc32c(c, buf + cut, sizeof(buf) - cut),
                         tg_crc32c(0, buf, sizeof(buf)));
    }
}

/* The instruction (where the CPU has it) and the tables agree: every length and alignment
 * around the stride and around one, two and three blocks of three streams (192 bytes each),
 * continued CRCs too. */
static void test_portable_agrees(void **state)
{
    unsigned char buf[800];

    (void)state;
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 7919 + 13);
    for (size_t off = 0; off < 8; off++) {
        for (size_t n = 0; n + off <= sizeof(buf); n++) {
            assert_int_equal(tg_crc32c(0, buf + off, n), tg_crc32c_portable(0, buf + off, n));
            assert_int_equal(tg_crc32c(0x12345678u, buf + off, n),
                             tg_crc32c_portable(0x12345678u, buf + off, n));
        }
    }
    assert_int_equal(tg_crc32c_portable(0, "123456789", 9), 0xE3069283u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_value),
        cmocka_unit_test(test_rfc3720_vectors),
        cmocka_unit_test(test_matches_bitwise_and_is_incremental),
        cmocka_unit_test(test_portable_agrees),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
