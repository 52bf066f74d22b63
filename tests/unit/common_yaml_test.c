/* tg_yaml unit tests: the range getters (unsigned, signed, floating point), durations, and the
 * document checks both services' loaders rely on (duplicate keys, first error wins). Every
 * message is checked whole: "FILE:LINE: key: problem". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tg_err.h"
#include "tg_yaml.h"

static char error[TG_YAML_LINE_MAX];
static int errors; /* error lines the sink received */

static void sink(void *ud, int is_error, const char *line)
{
    (void)ud;
    if (!is_error)
        return;
    errors++;
    snprintf(error, sizeof(error), "%s", line);
}

/* one: "v: TEXT" opened as t.yaml; *v is the value node. */
static void one(struct tg_yaml *y, const char *text, yaml_node_t **v)
{
    static char doc[512];
    yaml_node_t *root;

    error[0] = '\0';
    errors = 0;
    snprintf(doc, sizeof(doc), "v: %s\n", text);
    assert_int_equal(tg_yaml_open(y, "t.yaml", doc, strlen(doc), sink, NULL), 0);
    root = tg_yaml_root(y);
    assert_non_null(root);
    *v = tg_yaml_node(y, root->data.mapping.pairs.start->value);
}

static int u64r(const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    struct tg_yaml y;
    yaml_node_t *v;
    int rc;

    one(&y, text, &v);
    rc = tg_yaml_u64_range(&y, v, "v", lo, hi, out);
    tg_yaml_close(&y);
    return rc;
}

static int u32r(const char *text, uint32_t lo, uint32_t hi, uint32_t *out)
{
    struct tg_yaml y;
    yaml_node_t *v;
    int rc;

    one(&y, text, &v);
    rc = tg_yaml_u32_range(&y, v, "v", lo, hi, out);
    tg_yaml_close(&y);
    return rc;
}

static int intr(const char *text, int lo, int hi, int *out)
{
    struct tg_yaml y;
    yaml_node_t *v;
    int rc;

    one(&y, text, &v);
    rc = tg_yaml_int_range(&y, v, "v", lo, hi, out);
    tg_yaml_close(&y);
    return rc;
}

static int dblr(const char *text, double lo, int lo_inclusive, double hi, double *out)
{
    struct tg_yaml y;
    yaml_node_t *v;
    int rc;

    one(&y, text, &v);
    rc = tg_yaml_double_range(&y, v, "v", lo, lo_inclusive, hi, out);
    tg_yaml_close(&y);
    return rc;
}

static int dur(const char *text, int64_t min_s, int64_t max_s, int64_t *out)
{
    struct tg_yaml y;
    yaml_node_t *v;
    int rc;

    one(&y, text, &v);
    rc = tg_yaml_duration_s(&y, v, "v", min_s, max_s, out);
    tg_yaml_close(&y);
    return rc;
}

static void test_u64_u32_range(void **state)
{
    uint64_t v = 0;
    uint32_t w = 0;

    (void)state;
    assert_int_equal(u64r("7", 1, 10, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(u64r("1", 1, 10, &v), 0);
    assert_int_equal(u64r("10", 1, 10, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(u64r("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 99;
    assert_int_equal(u64r("0", 1, 10, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 1 and 10");
    assert_int_equal(v, 99); /* untouched on an error */
    assert_int_equal(u64r("11", 1, 10, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 1 and 10");
    assert_int_equal(u64r("-1", 0, 10, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected a non-negative integer");
    assert_int_equal(u64r("1.5", 0, 10, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected a non-negative integer");
    assert_int_equal(u64r("18446744073709551616", 0, UINT64_MAX, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected a non-negative integer");
    assert_int_equal(u64r("[1]", 0, 10, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected a scalar value");

    assert_int_equal(u32r("4294967295", 0, UINT32_MAX, &w), 0);
    assert_true(w == UINT32_MAX);
    assert_int_equal(u32r("4294967296", 0, UINT32_MAX, &w), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 0 and 4294967295");
    assert_int_equal(u32r("23", 0, 23, &w), 0);
    assert_int_equal(w, 23);
    assert_int_equal(u32r("24", 0, 23, &w), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 0 and 23");
}

static void test_int_range(void **state)
{
    int v = 0;

    (void)state;
    assert_int_equal(intr("42", 1, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(intr("+42", 1, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(intr("-1", -1, 23, &v), 0);
    assert_int_equal(v, -1);
    assert_int_equal(intr("-2147483648", INT32_MIN, INT32_MAX, &v), 0);
    assert_int_equal(v, INT32_MIN);
    assert_int_equal(intr("2147483647", INT32_MIN, INT32_MAX, &v), 0);
    assert_int_equal(v, INT32_MAX);
    v = 5;
    assert_int_equal(intr("0", 1, 100, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 1 and 100");
    assert_int_equal(v, 5);
    assert_int_equal(intr("-3", 1, 1000, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 1 and 1000");
    assert_int_equal(intr("2147483648", INT32_MIN, INT32_MAX, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between -2147483648 and 2147483647");
    assert_int_equal(intr("99999999999999999999999", 1, 100, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 1 and 100");
    assert_int_equal(intr("-99999999999999999999", 1, 100, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be between 1 and 100");
    /* one sign, digits only */
    static const char *const bad[] = {"\"+-5\"", "\"-+5\"", "\"--5\"", "\"++5\"", "\"-\"", "\"\"",
                                      "\" 5\"", "\"5 \"", "1e3", "0x10", "five", "\"5\\t\""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(intr(bad[i], -100, 100000, &v), TG_ECONFIG);
        if (strstr(error, "t.yaml:1: v: ") != error)
            fail_msg("%s: %s", bad[i], error);
    }
    assert_int_equal(intr("five", 1, 100, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected an integer");
}

static void test_double_range(void **state)
{
    double v = 0;

    (void)state;
    assert_int_equal(dblr("0.5", 0.0, 0, 1.0, &v), 0);
    assert_true(v == 0.5);
    assert_int_equal(dblr("1", 0.0, 0, 1.0, &v), 0);
    assert_true(v == 1.0);
    assert_int_equal(dblr("1e-3", 0.0, 0, 1.0, &v), 0);
    assert_true(v == 1e-3);
    assert_int_equal(dblr("0", 0.0, 1, 1.0, &v), 0); /* lo itself when inclusive */
    assert_true(v == 0.0);
    v = 0.25;
    assert_int_equal(dblr("0", 0.0, 0, 100.0, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be greater than 0 and at most 100");
    assert_true(v == 0.25);
    assert_int_equal(dblr("-0.5", 0.0, 1, 1.0, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be at least 0 and at most 1");
    assert_int_equal(dblr("1.5", 0.0, 0, 1.0, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be greater than 0 and at most 1");
    static const char *const bad[] = {"half", "\"\"", "inf", "nan", "1e999", "0.5x", "\"0.5 \""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dblr(bad[i], 0.0, 0, 1e300, &v), TG_ECONFIG);
        if (strcmp(error, "t.yaml:1: v: expected a number") != 0)
            fail_msg("%s: %s", bad[i], error);
    }
}

static void test_duration(void **state)
{
    int64_t v = 0;

    (void)state;
    assert_int_equal(dur("30d", 1, INT64_MAX, &v), 0);
    assert_int_equal(v, 30 * 86400);
    assert_int_equal(dur("1mo", 1, INT64_MAX, &v), 0);
    assert_int_equal(v, 30 * 86400);
    assert_int_equal(dur("45", 1, INT64_MAX, &v), 0);
    assert_int_equal(v, 45);
    assert_int_equal(dur("0", 0, INT64_MAX, &v), 0);
    assert_int_equal(v, 0);
    v = 7;
    assert_int_equal(dur("0", 1, INT64_MAX, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be at least 1 s");
    assert_int_equal(v, 7);
    assert_int_equal(dur("2h", 1, 3600, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: must be at most 3600 s");
    assert_int_equal(dur("1y", 1, INT64_MAX, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected a duration like 30s, 10m, 1h, 7d or 1mo");
    assert_int_equal(dur("-1d", 0, INT64_MAX, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: expected a duration like 30s, 10m, 1h, 7d or 1mo");
}

/* The getters read os.environ/NAME like the others. */
static void test_env(void **state)
{
    int v = 0;
    int64_t d = 0;

    (void)state;
    setenv("TG_YAML_TEST_N", "-7", 1);
    assert_int_equal(intr("os.environ/TG_YAML_TEST_N", -10, 10, &v), 0);
    assert_int_equal(v, -7);
    setenv("TG_YAML_TEST_N", "12h", 1);
    assert_int_equal(dur("os.environ/TG_YAML_TEST_N", 1, INT64_MAX, &d), 0);
    assert_int_equal(d, 43200);
    unsetenv("TG_YAML_TEST_N");
    assert_int_equal(intr("os.environ/TG_YAML_TEST_N", -10, 10, &v), TG_ECONFIG);
    assert_string_equal(error, "t.yaml:1: v: environment variable TG_YAML_TEST_N is not set");
}

/* A key twice in one mapping, at any depth, is refused at open, naming the second one; the first
 * error is the one reported. */
static void test_duplicate_and_first_error(void **state)
{
    struct tg_yaml y;
    const char *dup = "a: 1\nb:\n  c: 1\n  d: [ {e: 1, e: 2} ]\n";
    const char *two = "a: x\nb: y\n";
    yaml_node_t *root, *a, *b;
    int v;

    (void)state;
    error[0] = '\0';
    errors = 0;
    assert_int_equal(tg_yaml_open(&y, "d.yaml", dup, strlen(dup), sink, NULL), TG_ECONFIG);
    tg_yaml_close(&y);
    assert_string_equal(error, "d.yaml:4: e: duplicate key (given twice in one mapping)");
    assert_int_equal(errors, 1);

    error[0] = '\0';
    errors = 0;
    assert_int_equal(tg_yaml_open(&y, "f.yaml", two, strlen(two), sink, NULL), 0);
    root = tg_yaml_root(&y);
    a = tg_yaml_node(&y, root->data.mapping.pairs.start[0].value);
    b = tg_yaml_node(&y, root->data.mapping.pairs.start[1].value);
    assert_int_equal(tg_yaml_int_range(&y, a, "a", 0, 1, &v), TG_ECONFIG);
    assert_int_equal(tg_yaml_int_range(&y, b, "b", 0, 1, &v), TG_ECONFIG);
    tg_yaml_close(&y);
    assert_int_equal(errors, 1);
    assert_string_equal(error, "f.yaml:1: a: expected an integer");
    assert_true(y.failed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64_u32_range),
        cmocka_unit_test(test_int_range),
        cmocka_unit_test(test_double_range),
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_duplicate_and_first_error),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
