/* Unit tests of tg_str.h: the bounded copy against what snprintf(dst, cap, "%s", src) wrote,
 * and the decimal digits against printf's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "tg_str.h"

static void test_strcpy_cap_matches_snprintf(void **state)
{
    static const char *const srcs[] = {"", "a", "abc", "abcdefgh", "abcdefghijklmnopqrstuvwxyz"};

    (void)state;
    for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
        for (size_t cap = 1; cap <= 30; cap++) {
            char want[32], got[32];

            memset(want, 'x', sizeof(want));
            memset(got, 'x', sizeof(got));
            snprintf(want, cap, "%s", srcs[i]);
            assert_int_equal(tg_strcpy_cap(got, cap, srcs[i]), strlen(want));
            assert_memory_equal(got, want, cap);
            assert_int_equal(got[cap], 'x'); /* nothing past cap */
        }
    }
    {
        char got[4] = "zzz";

        assert_int_equal(tg_strcpy_cap(got, sizeof(got), NULL), 0);
        assert_string_equal(got, "");
    }
}

static void test_u64_dec_matches_printf(void **state)
{
    uint64_t v = 1;

    (void)state;
    for (uint64_t x = 0; x < 100000; x++) {
        char want[32], got[TG_U64_DEC_MAX + 1];
        size_t n = tg_u64_dec(got, x);

        got[n] = '\0';
        snprintf(want, sizeof(want), "%llu", (unsigned long long)x);
        assert_string_equal(got, want);
    }
    for (int k = 0; k < 64; k++, v *= 2) {
        uint64_t xs[3] = {v - 1, v, v + 1};

        for (int j = 0; j < 3; j++) {
            char want[32], got[TG_U64_DEC_MAX + 1];
            size_t n = tg_u64_dec(got, xs[j]);

            got[n] = '\0';
            snprintf(want, sizeof(want), "%llu", (unsigned long long)xs[j]);
            assert_string_equal(got, want);
        }
    }
    {
        char got[TG_U64_DEC_MAX + 1];
        size_t n = tg_u64_dec(got, UINT64_MAX);

        got[n] = '\0';
        assert_int_equal(n, TG_U64_DEC_MAX);
        assert_string_equal(got, "18446744073709551615");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strcpy_cap_matches_snprintf),
        cmocka_unit_test(test_u64_dec_matches_printf),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
