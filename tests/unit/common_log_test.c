/* tg_log unit tests: level gating before argument evaluation, the fixed line buffer and its
 * marker, rate limiting with counted suppression, escaping. Lines are captured by pointing
 * file descriptor 2 at a temporary file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tg_log.h"

#define CAPTURE_MAX (64 * 1024)

static int saved_fd = -1;
static FILE *capture_file;
static char captured[CAPTURE_MAX];
static int counter;

static void capture_begin(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    assert_non_null(capture_file);
    saved_fd = dup(STDERR_FILENO);
    assert_true(saved_fd >= 0);
    assert_true(dup2(fileno(capture_file), STDERR_FILENO) >= 0);
}

/* Ends the capture; returns the bytes written meanwhile (also in captured, NUL-terminated). */
static size_t capture_end(void)
{
    size_t n;

    fflush(stderr);
    assert_true(dup2(saved_fd, STDERR_FILENO) >= 0);
    close(saved_fd);
    saved_fd = -1;
    rewind(capture_file);
    n = fread(captured, 1, sizeof(captured) - 1, capture_file);
    captured[n] = '\0';
    fclose(capture_file);
    capture_file = NULL;
    return n;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

static int next_value(void)
{
    return ++counter;
}

static void test_level_gating_skips_argument_evaluation(void **state)
{
    struct tg_log_stats before;
    struct tg_log_stats after;

    (void)state;
    tg_log_init("unit-test");
    tg_log_set_level(TG_LOG_WARN);
    counter = 0;
    tg_log_get_stats(&before);
    capture_begin();
    TG_DEBUG("msg=debug n=%d", next_value());
    TG_INFO("msg=info n=%d", next_value());
    assert_int_equal(counter, 0); /* not evaluated below the level */
    TG_WARN("msg=warn n=%d", next_value());
    TG_ERROR("msg=error n=%d", next_value());
    capture_end();
    tg_log_get_stats(&after);
    assert_int_equal(counter, 2);
    assert_int_equal(count_lines(captured), 2);
    assert_non_null(strstr(captured, "level=warn svc=unit-test msg=warn n=1\n"));
    assert_non_null(strstr(captured, "level=error svc=unit-test msg=error n=2\n"));
    assert_null(strstr(captured, "msg=info"));
    assert_int_equal(after.lines - before.lines, 2);
    assert_int_equal(after.bytes - before.bytes, strlen(captured));
    assert_int_equal(strncmp(captured, "ts=", 3), 0);

    tg_log_set_level(TG_LOG_OFF);
    capture_begin();
    TG_ERROR("n=%d", next_value());
    capture_end();
    assert_int_equal(counter, 2);
    assert_string_equal(captured, "");
    tg_log_set_level(TG_LOG_DEBUG);
    capture_begin();
    TG_DEBUG("n=%d", next_value());
    capture_end();
    assert_int_equal(counter, 3);
    assert_non_null(strstr(captured, "level=debug"));
    tg_log_set_level(TG_LOG_INFO);
}

static void test_parse_level(void **state)
{
    (void)state;
    assert_int_equal(tg_log_parse_level("debug"), TG_LOG_DEBUG);
    assert_int_equal(tg_log_parse_level("INFO"), TG_LOG_INFO);
    assert_int_equal(tg_log_parse_level("warning"), TG_LOG_WARN);
    assert_int_equal(tg_log_parse_level("error"), TG_LOG_ERROR);
    assert_int_equal(tg_log_parse_level("off"), TG_LOG_OFF);
    assert_int_equal(tg_log_parse_level("verbose"), -1);
}

static void test_long_line_truncated_with_marker(void **state)
{
    struct tg_log_stats before;
    struct tg_log_stats after;
    char *big = malloc(100000);
    size_t n;

    (void)state;
    assert_non_null(big);
    memset(big, 'a', 99999);
    big[99999] = '\0';
    tg_log_set_level(TG_LOG_INFO);
    tg_log_get_stats(&before);
    capture_begin();
    TG_INFO("msg=big payload=%s", big);
    n = capture_end();
    tg_log_get_stats(&after);
    /* one line of exactly TG_LOG_LINE_MAX bytes, newline included, ending with the marker */
    assert_int_equal(n, TG_LOG_LINE_MAX);
    assert_int_equal(count_lines(captured), 1);
    assert_string_equal(captured + n - 4, "...\n");
    assert_int_equal(after.truncated - before.truncated, 1);

    /* a line that fits is not marked */
    capture_begin();
    TG_INFO("msg=small");
    n = capture_end();
    tg_log_get_stats(&before);
    assert_true(n < TG_LOG_LINE_MAX);
    assert_null(strstr(captured, "..."));
    assert_int_equal(before.truncated, after.truncated);
    free(big);
}

static void test_newlines_do_not_split_lines(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_INFO);
    capture_begin();
    TG_INFO("msg=%s", "first\nsecond\r\nthird");
    capture_end();
    assert_int_equal(count_lines(captured), 1);
    assert_non_null(strstr(captured, "msg=first second  third\n"));
}

static void emit_rate_limited(int times)
{
    for (int i = 0; i < times; i++)
        TG_WARN_RL("msg=redis_down n=%d", next_value());
}

static void test_rate_limit_counts_suppressed(void **state)
{
    struct tg_log_stats before;
    struct tg_log_stats after;
    struct tg_log_rl rl;
    uint64_t supp = 99;

    (void)state;
    tg_log_set_level(TG_LOG_INFO);
    counter = 0;
    tg_log_get_stats(&before);
    capture_begin();
    emit_rate_limited(100); /* one call site, well within one interval */
    capture_end();
    tg_log_get_stats(&after);
    assert_int_equal(count_lines(captured), 1);
    assert_non_null(strstr(captured, "msg=redis_down n=1\n"));
    assert_int_equal(counter, 1); /* suppressed lines are not formatted either */
    assert_int_equal(after.suppressed - before.suppressed, 99);

    /* the next emitted line of a site reports how many were dropped */
    memset(&rl, 0, sizeof(rl));
    assert_int_equal(tg_log_rl_pass(&rl, &supp), 1);
    assert_int_equal(supp, 0);
    for (int i = 0; i < 7; i++)
        assert_int_equal(tg_log_rl_pass(&rl, &supp), 0);
    atomic_store(&rl.next_ms, 0); /* the interval has passed */
    assert_int_equal(tg_log_rl_pass(&rl, &supp), 1);
    assert_int_equal(supp, 7);
    capture_begin();
    tg_log_emit_rl(TG_LOG_WARN, supp, "msg=x");
    capture_end();
    assert_non_null(strstr(captured, "msg=x suppressed=7\n"));

    /* below the level nothing is counted as suppressed */
    tg_log_set_level(TG_LOG_ERROR);
    tg_log_get_stats(&before);
    emit_rate_limited(10);
    tg_log_get_stats(&after);
    assert_int_equal(after.suppressed, before.suppressed);
    tg_log_set_level(TG_LOG_INFO);
}

static void test_escape(void **state)
{
    char dst[64];
    char small[8];
    const char src[] = "a\"b\\c\n\x01\xff";

    (void)state;
    tg_log_escape(dst, sizeof(dst), src, sizeof(src) - 1);
    assert_string_equal(dst, "a\\\"b\\\\c\\x0a\\x01\\xff");
    /* cut with the marker, never past the buffer */
    tg_log_escape(small, sizeof(small), "abcdefghijkl", 12);
    assert_string_equal(small, "abcd...");
    /* a string that fits exactly is not cut */
    tg_log_escape(small, sizeof(small), "abcdefg", 7);
    assert_string_equal(small, "abcdefg");
    tg_log_escape(small, sizeof(small), "", 0);
    assert_string_equal(small, "");
    for (size_t cap = 1; cap <= sizeof(small); cap++) {
        tg_log_escape(small, cap, "\x01\x02\x03\x04\x05", 5);
        assert_true(strlen(small) < cap);
    }
    /* only srclen bytes are read */
    tg_log_escape(dst, sizeof(dst), "abcdef", 3);
    assert_string_equal(dst, "abc");
}

static void test_json_plain(void **state)
{
    char out[16];

    (void)state;
    assert_string_equal(tg_log_json_plain(out, sizeof(out), "a \"b\" \\c\n\x01\xff!"),
                        "a 'b' /c!");
    assert_string_equal(tg_log_json_plain(out, 6, "0123456789"), "01234");
    assert_string_equal(tg_log_json_plain(out, 1, "x"), "");
    assert_string_equal(tg_log_json_plain(out, sizeof(out), ""), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_gating_skips_argument_evaluation),
        cmocka_unit_test(test_parse_level),
        cmocka_unit_test(test_long_line_truncated_with_marker),
        cmocka_unit_test(test_newlines_do_not_split_lines),
        cmocka_unit_test(test_rate_limit_counts_suppressed),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_json_plain),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
