/* tg_utf8 unit tests: the classic malformed forms one by one, then every sequence of up to three
 * bytes (and four-byte sequences over every lead byte and the boundary continuation values)
 * against a decode-then-check reference; cut points and bounded copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tg_utf8.h"

/* Reference: decode by the bit patterns alone, then apply the rules on the code point. */
static size_t utf8_reference(const unsigned char *s, size_t n)
{
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t len;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xE0) == 0xC0) {
        len = 2;
        cp = s[0] & 0x1Fu;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = s[0] & 0x0Fu;
    } else if ((s[0] & 0xF8) == 0xF0) {
        len = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static size_t seq(const char *s, size_t n)
{
    return tg_utf8_seq((const unsigned char *)s, n);
}

static void test_valid_forms(void **state)
{
    (void)state;
    assert_int_equal(seq("A", 1), 1);
    assert_int_equal(seq("\0", 1), 1);
    assert_int_equal(seq("\x7f", 1), 1);
    assert_int_equal(seq("\xc2\x80", 2), 2);         /* U+0080 */
    assert_int_equal(seq("\xc3\xa9tail", 6), 2);     /* U+00E9, more bytes after it */
    assert_int_equal(seq("\xe0\xa0\x80", 3), 3);     /* U+0800 */
    assert_int_equal(seq("\xe2\x82\xac", 3), 3);     /* U+20AC */
    assert_int_equal(seq("\xed\x9f\xbf", 3), 3);     /* U+D7FF */
    assert_int_equal(seq("\xee\x80\x80", 3), 3);     /* U+E000 */
    assert_int_equal(seq("\xef\xbf\xbf", 3), 3);     /* U+FFFF */
    assert_int_equal(seq("\xf0\x90\x80\x80", 4), 4); /* U+10000 */
    assert_int_equal(seq("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
}

static void test_malformed_forms(void **state)
{
    (void)state;
    assert_int_equal(seq("\x80", 1), 0);             /* stray continuation */
    assert_int_equal(seq("\xbf", 1), 0);
    assert_int_equal(seq("\xc0\x80", 2), 0);         /* overlong NUL */
    assert_int_equal(seq("\xc1\xbf", 2), 0);         /* overlong U+007F */
    assert_int_equal(seq("\xe0\x9f\xbf", 3), 0);     /* overlong U+07FF */
    assert_int_equal(seq("\xf0\x8f\xbf\xbf", 4), 0); /* overlong U+FFFF */
    assert_int_equal(seq("\xed\xa0\x80", 3), 0);     /* U+D800, a surrogate */
    assert_int_equal(seq("\xed\xbf\xbf", 3), 0);     /* U+DFFF */
    assert_int_equal(seq("\xf4\x90\x80\x80", 4), 0); /* U+110000 */
    assert_int_equal(seq("\xf5\x80\x80\x80", 4), 0);
    assert_int_equal(seq("\xfe", 1), 0);
    assert_int_equal(seq("\xff", 1), 0);
    assert_int_equal(seq("\xc3" "A", 2), 0);            /* continuation missing */
    assert_int_equal(seq("\xe2\x82", 2), 0);         /* cut by the end of the input */
    assert_int_equal(seq("\xe2\x82\xac", 2), 0);     /* the third byte is past n */
    assert_int_equal(seq("\xf0\x90\x80", 3), 0);
}

static void test_all_short_sequences(void **state)
{
    unsigned char b[3];

    (void)state;
    for (unsigned a = 0; a < 256; a++) {
        b[0] = (unsigned char)a;
        assert_int_equal(tg_utf8_seq(b, 1), utf8_reference(b, 1));
        for (unsigned c = 0; c < 256; c++) {
            b[1] = (unsigned char)c;
            assert_int_equal(tg_utf8_seq(b, 2), utf8_reference(b, 2));
            if (a < 0xE0 || a > 0xEF)
                continue; /* three bytes matter only after a three-byte lead */
            for (unsigned d = 0; d < 256; d++) {
                b[2] = (unsigned char)d;
                assert_int_equal(tg_utf8_seq(b, 3), utf8_reference(b, 3));
            }
        }
    }
}

static void test_four_byte_boundaries(void **state)
{
    static const unsigned char v[] = {0x00, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F,
                                      0xA0, 0xBE, 0xBF, 0xC0, 0xC2, 0xFF};
    const size_t nv = sizeof(v);
    unsigned char b[4];

    (void)state;
    for (unsigned a = 0xE0; a < 256; a++) {
        b[0] = (unsigned char)a;
        for (size_t i = 0; i < nv * nv * nv; i++) {
            b[1] = v[i % nv];
            b[2] = v[i / nv % nv];
            b[3] = v[i / nv / nv];
            for (size_t n = 1; n <= 4; n++)
                assert_int_equal(tg_utf8_seq(b, n), utf8_reference(b, n));
        }
        for (unsigned c = 0; c < 256; c++) {
            b[1] = (unsigned char)c;
            b[2] = 0x80;
            b[3] = 0xBF;
            assert_int_equal(tg_utf8_seq(b, 4), utf8_reference(b, 4));
        }
    }
}

static void test_utf8_boundary(void **state)
{
    const char *s = "ab\xc3\xa9"
                    "c\xe2\x82\xac"
                    "d\xf0\x9f\x98\x80";
    size_t len = strlen(s);

    (void)state;
    assert_int_equal(tg_utf8_boundary(s, len, 100), len);
    assert_int_equal(tg_utf8_boundary(s, len, 2), 2);
    assert_int_equal(tg_utf8_boundary(s, len, 3), 2); /* inside é */
    assert_int_equal(tg_utf8_boundary(s, len, 4), 4);
    assert_int_equal(tg_utf8_boundary(s, len, 6), 5); /* inside € */
    assert_int_equal(tg_utf8_boundary(s, len, 7), 5);
    assert_int_equal(tg_utf8_boundary(s, len, 8), 8);
    assert_int_equal(tg_utf8_boundary(s, len, 10), 9); /* inside the emoji */
    assert_int_equal(tg_utf8_boundary(s, len, 11), 9);
    assert_int_equal(tg_utf8_boundary(s, len, 12), 9);
    assert_int_equal(tg_utf8_boundary(s, len, 0), 0);
}

static void test_utf8_copy(void **state)
{
    char out[5];
    const char unterminated[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};

    (void)state;
    tg_utf8_copy(out, sizeof(out), "ab");
    assert_string_equal(out, "ab");
    tg_utf8_copy(out, sizeof(out), "abcdef");
    assert_string_equal(out, "abcd");
    tg_utf8_copy(out, sizeof(out), "ab\xe2\x82\xac"); /* the euro sign would not fit whole */
    assert_string_equal(out, "ab");
    tg_utf8_copy(out, sizeof(out), "a\xe2\x82\xac");
    assert_string_equal(out, "a\xe2\x82\xac");
    tg_utf8_copy(out, sizeof(out), NULL);
    assert_string_equal(out, "");
    tg_utf8_copy(out, 1, "abc");
    assert_string_equal(out, "");
    /* src is read up to cap bytes only */
    tg_utf8_copy(out, sizeof(out), unterminated);
    assert_string_equal(out, "abcd");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_forms),
        cmocka_unit_test(test_malformed_forms),
        cmocka_unit_test(test_all_short_sequences),
        cmocka_unit_test(test_four_byte_boundaries),
        cmocka_unit_test(test_utf8_boundary),
        cmocka_unit_test(test_utf8_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
