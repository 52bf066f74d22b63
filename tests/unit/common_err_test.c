/* tg_err unit tests: every code in the one error map has a text and a name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tg_err.h"

struct err_row {
    int code;
    const char *name;
    const char *text;
};

static const struct err_row rows[] = {
#define TG_ERR_ROW(name, code, text) {code, #name, text},
    TG_ERRORS(TG_ERR_ROW)
#undef TG_ERR_ROW
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static void test_every_code_has_text_and_name(void **state)
{
    (void)state;
    assert_true(NROWS >= 18);
    for (size_t i = 0; i < NROWS; i++) {
        assert_true(rows[i].code <= 0);
        assert_string_equal(tg_strerror(rows[i].code), rows[i].text);
        assert_string_equal(tg_errname(rows[i].code), rows[i].name);
        assert_true(strlen(rows[i].text) > 0);
        assert_string_not_equal(tg_strerror(rows[i].code), "unknown error");
        assert_true(strncmp(rows[i].name, "TG_", 3) == 0);
    }
}

static void test_codes_and_names_are_unique(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        for (size_t j = i + 1; j < NROWS; j++) {
            assert_int_not_equal(rows[i].code, rows[j].code);
            assert_string_not_equal(rows[i].name, rows[j].name);
        }
    }
}

static void test_known_values_and_unknown_codes(void **state)
{
    (void)state;
    assert_int_equal(TG_OK, 0);
    assert_string_equal(tg_strerror(0), "ok");
    assert_string_equal(tg_errname(TG_EFULL), "TG_EFULL");
    assert_string_equal(tg_strerror(TG_ETOOBIG), "too large");
    assert_string_equal(tg_strerror(-9999), "unknown error");
    assert_string_equal(tg_strerror(5), "unknown error");
    assert_string_equal(tg_errname(-9999), "TG_EUNKNOWN");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_has_text_and_name),
        cmocka_unit_test(test_codes_and_names_are_unique),
        cmocka_unit_test(test_known_values_and_unknown_codes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
