/* tg_buf unit tests: the capacity is fixed, overflow is cut and flagged, never grown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tg_buf.h"
#include "tg_err.h"

static void test_append_up_to_cap(void **state)
{
    struct tg_buf b;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 8), 0);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(tg_buf_append(&b, "abc", 3), 0);
    assert_int_equal(tg_buf_puts(&b, "defgh"), 0); /* exactly full */
    assert_int_equal(b.len, 8);
    assert_false(b.truncated);
    assert_string_equal(b.data, "abcdefgh");
    assert_int_equal(tg_buf_append(&b, "x", 1), TG_EFULL);
    assert_true(b.truncated);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "abcdefgh");
    tg_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_false(b.truncated);
    assert_string_equal(b.data, "");
    tg_buf_fini(&b);
    assert_null(b.data);
}

static void test_append_keeps_the_part_that_fits(void **state)
{
    struct tg_buf b;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 5), 0);
    assert_int_equal(tg_buf_puts(&b, "ab"), 0);
    assert_int_equal(tg_buf_puts(&b, "cdefgh"), TG_EFULL);
    assert_string_equal(b.data, "abcde");
    assert_int_equal(b.cap, 5);
    tg_buf_fini(&b);
}

static void test_printf_truncates(void **state)
{
    struct tg_buf b;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 5), 0);
    assert_int_equal(tg_buf_printf(&b, "%d", 12345), 0); /* exactly fits */
    assert_string_equal(b.data, "12345");
    assert_false(b.truncated);
    tg_buf_reset(&b);
    assert_int_equal(tg_buf_printf(&b, "%s-%d", "abc", 42), TG_EFULL);
    assert_true(b.truncated);
    assert_int_equal(b.len, 5);
    assert_string_equal(b.data, "abc-4");
    /* a full buffer takes nothing more, and stays terminated */
    assert_int_equal(tg_buf_printf(&b, "more"), TG_EFULL);
    assert_string_equal(b.data, "abc-4");
    tg_buf_fini(&b);
}

static void test_zero_cap_and_fini_twice(void **state)
{
    struct tg_buf b;

    (void)state;
    assert_int_equal(tg_buf_init(&b, 0), 0);
    assert_int_equal(tg_buf_puts(&b, "x"), TG_EFULL);
    assert_int_equal(tg_buf_printf(&b, "%s", "x"), TG_EFULL);
    assert_string_equal(b.data, "");
    tg_buf_fini(&b);
    tg_buf_fini(&b);
}

static void test_large_payload_is_bounded(void **state)
{
    struct tg_buf b;
    static char big[1 << 20];

    (void)state;
    memset(big, 'z', sizeof(big) - 1);
    assert_int_equal(tg_buf_init(&b, 100), 0);
    for (int i = 0; i < 10; i++)
        tg_buf_puts(&b, big);
    assert_int_equal(b.len, 100);
    assert_int_equal(strlen(b.data), 100);
    tg_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_up_to_cap),
        cmocka_unit_test(test_append_keeps_the_part_that_fits),
        cmocka_unit_test(test_printf_truncates),
        cmocka_unit_test(test_zero_cap_and_fini_twice),
        cmocka_unit_test(test_large_payload_is_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
