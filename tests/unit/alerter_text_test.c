/* alerter text unit tests: cleaning, masking, rendering and the Slack payload bound.
 *
 * The payload must be valid JSON of at most 4,000 bytes, its mrkdwn text at most 3,500 bytes
 * and every section at most 3,000, whatever the alert holds: quotes, backslashes, control
 * bytes, invalid UTF-8, and multibyte characters straddling every possible cut. Validity is
 * checked with jansson, which rejects invalid UTF-8. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "alert_text.h"
#include "alerter.h"
#include "tg_limits.h"

#define RANDOM_ROUNDS 3000

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng(void)
{
    uint64_t x = rng_state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

/* Parse a payload, check every Slack bound, return the summed section text length. */
static size_t check_payload(const char *payload, size_t len)
{
    json_error_t jerr;
    json_t *root;
    json_t *blocks;
    json_t *text;
    size_t total = 0;
    size_t i;
    json_t *b;

    assert_true(len <= TG_ALERT_PAYLOAD_MAX_BYTES);
    assert_int_equal(strlen(payload), len);
    root = json_loadb(payload, len, 0, &jerr);
    if (root == NULL)
        fail_msg("payload is not valid JSON (%s): %.200s", jerr.text, payload);
    text = json_object_get(root, "text");
    assert_true(json_is_string(text));
    assert_true(json_string_length(text) > 0);
    assert_true(json_string_length(text) <= TG_ALERT_TEXT_MAX_BYTES);
    blocks = json_object_get(root, "blocks");
    assert_true(json_is_array(blocks));
    assert_true(json_array_size(blocks) <= SP_ALERT_BLOCKS_MAX);
    json_array_foreach(blocks, i, b)
    {
        json_t *t = json_object_get(b, "text");
        json_t *s;

        assert_string_equal(json_string_value(json_object_get(b, "type")), "section");
        assert_string_equal(json_string_value(json_object_get(t, "type")), "mrkdwn");
        s = json_object_get(t, "text");
        assert_true(json_is_string(s));
        assert_true(json_string_length(s) > 0);
        assert_true(json_string_length(s) <= SP_ALERT_SECTION_MAX_BYTES);
        total += json_string_length(s);
    }
    assert_true(total <= TG_ALERT_TEXT_MAX_BYTES);
    json_decref(root);
    return total;
}

static void fill(char *dst, size_t cap, const char *unit)
{
    size_t ul = strlen(unit);
    size_t n = 0;

    while (n + ul < cap) {
        memcpy(dst + n, unit, ul);
        n += ul;
    }
    dst[n] = '\0';
}

static void alert_at_caps(struct sp_alert *a, const char *unit)
{
    memset(a, 0, sizeof(*a));
    a->type = SP_ALERT_DEPLOYMENT_FAILURES;
    a->severity = SP_ALERT_CRITICAL;
    fill(a->subject, sizeof(a->subject), unit);
    fill(a->summary, sizeof(a->summary), unit);
    a->nfields = SP_ALERT_FIELDS_MAX;
    for (int i = 0; i < SP_ALERT_FIELDS_MAX; i++) {
        fill(a->fields[i].name, sizeof(a->fields[i].name), unit);
        fill(a->fields[i].value, sizeof(a->fields[i].value), unit);
    }
}

static void test_clean_str(void **state)
{
    char s[32];

    (void)state;
    strcpy(s, "a\tb\nc\x01\x7f"
              "d");
    sp_alert_clean_str(s, sizeof(s));
    assert_string_equal(s, "a b c  d");
    /* Overlong '/', lone continuation, surrogate, truncated sequence at the end. */
    strcpy(s, "\xc0\xaf|\x80|\xed\xa0\x80|\xe2\x82");
    sp_alert_clean_str(s, sizeof(s));
    assert_string_equal(s, "??|?|???|??");
    /* Valid multibyte text is untouched. */
    strcpy(s, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    sp_alert_clean_str(s, sizeof(s));
    assert_string_equal(s, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    /* An unterminated buffer is ended at its capacity. */
    memset(s, 'x', sizeof(s));
    sp_alert_clean_str(s, sizeof(s));
    assert_int_equal(strlen(s), sizeof(s) - 1);
}

/* ---- masking ------------------------------------------------------------------------------- */

static void test_mask(void **state)
{
    char s[256];
    const char *secrets[] = {"http://127.0.0.1:9999/slack/T000/B000/hush", ""};

    (void)state;
    strcpy(s, "upstream said: invalid key sk-proj-abcdefghijklmnop (401)");
    assert_true(sp_alert_mask_str(s, sizeof(s), NULL, 0) >= 1);
    assert_null(strstr(s, "abcdefghijklmnop"));
    assert_non_null(strstr(s, "sk-***"));

    strcpy(s, "Authorization: Bearer eyJhbGciOi.x.y rejected");
    sp_alert_mask_str(s, sizeof(s), NULL, 0);
    assert_null(strstr(s, "eyJhbGciOi"));

    strcpy(s, "posting to https://hooks.slack.com/services/T1/B2/abcdef failed");
    sp_alert_mask_str(s, sizeof(s), NULL, 0);
    assert_null(strstr(s, "T1/B2"));
    assert_non_null(strstr(s, "hooks.slack.com/***"));

    strcpy(s, "api_key=abcdef123456 and token: 0123456789abcdef");
    sp_alert_mask_str(s, sizeof(s), NULL, 0);
    assert_null(strstr(s, "abcdef123456"));
    assert_null(strstr(s, "0123456789abcdef"));

    /* Configured secrets, and the path of a secret URL on its own. */
    strcpy(s, "x http://127.0.0.1:9999/slack/T000/B000/hush y /slack/T000/B000/hush z");
    assert_int_equal(sp_alert_mask_str(s, sizeof(s), secrets, 2), 2);
    assert_null(strstr(s, "hush"));
    assert_string_equal(s, "x *** y *** z");

    /* Ordinary text is left alone. */
    strcpy(s, "deployment main-1 failing: 12 of 20 attempts, ask the team");
    assert_int_equal(sp_alert_mask_str(s, sizeof(s), secrets, 2), 0);
    assert_string_equal(s, "deployment main-1 failing: 12 of 20 attempts, ask the team");
}

/* ---- rendering ----------------------------------------------------------------------------- */

static void test_render_layout(void **state)
{
    struct sp_alert a;
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    size_t n;

    (void)state;
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_WARNING, "key team-a reached 80% of budget",
                  "team-a has spent <$8> & counting");
    assert_int_equal(sp_alert_add_field(&a, "spend", "$8.0000"), 0);
    n = sp_alert_render_text(&a, 3, 600, text, sizeof(text));
    assert_int_equal(n, strlen(text));
    assert_non_null(strstr(text, "*[warning] budget*: key team-a reached 80% of budget"));
    assert_non_null(strstr(text, "&lt;$8&gt; &amp; counting"));
    assert_non_null(strstr(text, "_3 similar alerts suppressed in the last 600 s_"));
    assert_non_null(strstr(text, "\n\n\xe2\x80\xa2 *spend*: $8.0000"));

    n = sp_alert_render_text(&a, 0, 600, text, sizeof(text));
    assert_null(strstr(text, "suppressed"));
}

static void test_fields_cap(void **state)
{
    struct sp_alert a;

    (void)state;
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_INFO, "s", "m");
    for (int i = 0; i < SP_ALERT_FIELDS_MAX; i++)
        assert_int_equal(sp_alert_add_fieldf(&a, "n", "%d", i), 0);
    assert_int_equal(sp_alert_add_field(&a, "one", "too many"), -4 /* TG_EFULL */);
    assert_int_equal(a.nfields, SP_ALERT_FIELDS_MAX);
}

/* A long multibyte string into a fixed field is cut at a character boundary. */
static void test_init_cuts_utf8(void **state)
{
    char big[1024];
    struct sp_alert a;

    (void)state;
    fill(big, sizeof(big), "\xe2\x82\xac"); /* € x 341 */
    sp_alert_init(&a, SP_ALERT_BUDGET, SP_ALERT_INFO, big, big);
    assert_int_equal(strlen(a.subject) % 3, 0);
    assert_true(strlen(a.subject) <= SP_ALERT_SUBJECT_CAP - 1);
    assert_true(strlen(a.subject) > SP_ALERT_SUBJECT_CAP - 4);
    assert_int_equal(strlen(a.summary) % 3, 0);
    sp_alert_add_field(&a, big, big);
    assert_int_equal(strlen(a.fields[0].name) % 3, 0);
    assert_int_equal(strlen(a.fields[0].value) % 3, 0);
}

/* Every string at its cap, with the worst expansion for mrkdwn ('&' -> "&amp;") and for JSON
 * ('"' -> "\""): text and payload stay within their bounds and end in the cut mark. */
static void test_caps_worst_expansion(void **state)
{
    static const char *const units[] = {
        "&", "\"", "\\", "<", "\xe2\x82\xac", "a", "\xf0\x9f\x98\x80"};
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    char payload[TG_ALERT_PAYLOAD_MAX_BYTES + 1];
    struct sp_alert a;

    (void)state;
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        size_t tl, pl;

        alert_at_caps(&a, units[u]);
        sp_alert_sanitize(&a, NULL, 0);
        tl = sp_alert_render_text(&a, 123456, 600, text, sizeof(text));
        assert_true(tl <= TG_ALERT_TEXT_MAX_BYTES);
        pl = sp_alert_build_payload(text, tl, payload, sizeof(payload));
        assert_true(pl > 0);
        check_payload(payload, pl);
        /* The suppressed count is in the first section, so a cut never hides it. */
        assert_non_null(strstr(payload, "123456 similar alerts suppressed"));
    }
}

/* Raw text straight into the payload builder: quotes, backslashes and control bytes expand on
 * escaping, up to 6x for control bytes. */
static void test_payload_escaping_bound(void **state)
{
    static const char units[] = {'"', '\\', '\x01', '\x1f', '\t', '/'};
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    char payload[TG_ALERT_PAYLOAD_MAX_BYTES + 1];

    (void)state;
    for (size_t u = 0; u < sizeof(units); u++) {
        size_t pl;

        memset(text, units[u], TG_ALERT_TEXT_MAX_BYTES);
        text[0] = 'x';
        text[TG_ALERT_TEXT_MAX_BYTES] = '\0';
        pl = sp_alert_build_payload(text, TG_ALERT_TEXT_MAX_BYTES, payload, sizeof(payload));
        assert_true(pl > 0);
        check_payload(payload, pl);
        /* Doubling on escape cannot fit twice 3,300 bytes: the text was cut. */
        if (units[u] == '"' || units[u] == '\\')
            assert_non_null(strstr(payload, SP_ALERT_CUT_MARK));
        for (size_t i = 0; i < pl; i++)
            assert_true((unsigned char)payload[i] >= 0x20);
    }
    /* A buffer below the bound is refused, not overrun. */
    assert_int_equal(sp_alert_build_payload("x", 1, payload, TG_ALERT_PAYLOAD_MAX_BYTES), 0);
}

/* Multibyte characters placed so that every cut point falls at every offset inside them. */
static void test_payload_multibyte_at_cut(void **state)
{
    static const char *const chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    char rendered[TG_ALERT_TEXT_MAX_BYTES + 1];
    char payload[TG_ALERT_PAYLOAD_MAX_BYTES + 1];

    (void)state;
    for (size_t c = 0; c < 3; c++) {
        for (size_t shift = 0; shift < 8; shift++) {
            for (size_t quotes = 0; quotes < 600; quotes += 37) {
                size_t n = 0;
                size_t pl;
                struct sp_alert a;

                /* A prefix of quotes (2 bytes escaped) moves the escaped cut by any amount. */
                for (size_t i = 0; i < shift; i++)
                    text[n++] = 'a';
                for (size_t i = 0; i < quotes; i++)
                    text[n++] = '"';
                while (n + strlen(chars[c]) <= TG_ALERT_TEXT_MAX_BYTES) {
                    memcpy(text + n, chars[c], strlen(chars[c]));
                    n += strlen(chars[c]);
                }
                text[n] = '\0';
                pl = sp_alert_build_payload(text, n, payload, sizeof(payload));
                check_payload(payload, pl);

                /* The same through an alert: the text renderer's own cut. */
                alert_at_caps(&a, chars[c]);
                memset(a.subject, 'a', shift);
                sp_alert_sanitize(&a, NULL, 0);
                n = sp_alert_render_text(&a, quotes, 600, rendered, sizeof(rendered));
                pl = sp_alert_build_payload(rendered, n, payload, sizeof(payload));
                check_payload(payload, pl);
            }
        }
    }
}

/* Random bytes in every field: sanitize, render, build, always within bounds. */
static void test_random_alerts(void **state)
{
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    char payload[TG_ALERT_PAYLOAD_MAX_BYTES + 1];
    struct sp_alert a;

    (void)state;
    for (int round = 0; round < RANDOM_ROUNDS; round++) {
        unsigned char *p = (unsigned char *)&a;
        size_t tl, pl;

        for (size_t i = 0; i < sizeof(a); i++)
            p[i] = (unsigned char)(rng() & 0xff);
        /* Bias some rounds towards printable and multibyte-heavy content. */
        if (round % 3 == 1) {
            for (size_t i = 0; i < sizeof(a); i++)
                p[i] = (unsigned char)(0x80 | (p[i] & 0x3f)) | (p[i] & 1 ? 0x40 : 0);
        }
        sp_alert_sanitize(&a, NULL, 0);
        tl = sp_alert_render_text(&a, rng() % 1000, 600, text, sizeof(text));
        assert_true(tl <= TG_ALERT_TEXT_MAX_BYTES);
        pl = sp_alert_build_payload(text, tl, payload, sizeof(payload));
        check_payload(payload, pl);
        /* The raw text builder copes with unsanitized bytes too. */
        for (size_t i = 0; i < tl; i++)
            text[i] = (char)(rng() & 0xff);
        pl = sp_alert_build_payload(text, tl, payload, sizeof(payload));
        check_payload(payload, pl);
    }
}

/* Size independence: the payload of an alert whose every field is at its cap is within the
 * same fixed bound as one with tiny fields, and the alert value itself is the same size. */
static void test_capped_no_larger_than_bound(void **state)
{
    char text[TG_ALERT_TEXT_MAX_BYTES + 1];
    char payload[TG_ALERT_PAYLOAD_MAX_BYTES + 1];
    struct sp_alert big, tiny;
    size_t big_len, tiny_len;

    (void)state;
    alert_at_caps(&big, "\"");
    sp_alert_sanitize(&big, NULL, 0);
    big_len = sp_alert_build_payload(text, sp_alert_render_text(&big, 0, 600, text, sizeof(text)),
                                     payload, sizeof(payload));
    sp_alert_init(&tiny, SP_ALERT_DEPLOYMENT_FAILURES, SP_ALERT_CRITICAL, "x", "y");
    sp_alert_add_field(&tiny, "a", "b");
    sp_alert_sanitize(&tiny, NULL, 0);
    tiny_len = sp_alert_build_payload(text, sp_alert_render_text(&tiny, 0, 600, text, sizeof(text)),
                                      payload, sizeof(payload));
    assert_true(tiny_len > 0);
    assert_true(big_len <= TG_ALERT_PAYLOAD_MAX_BYTES);
    assert_true(tiny_len <= TG_ALERT_PAYLOAD_MAX_BYTES);
    assert_int_equal(sizeof(big), sizeof(tiny));
}

static void test_format_usd(void **state)
{
    char s[48];

    (void)state;
    sp_alert_format_usd(0, s, sizeof(s));
    assert_string_equal(s, "$0.0000");
    sp_alert_format_usd(12345678900, s, sizeof(s));
    assert_string_equal(s, "$12.3456");
    sp_alert_format_usd(-1500000000, s, sizeof(s));
    assert_string_equal(s, "-$1.5000");
    sp_alert_format_usd(INT64_MIN, s, sizeof(s));
    assert_string_equal(s, "-$9223372036.8547");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_str),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_render_layout),
        cmocka_unit_test(test_fields_cap),
        cmocka_unit_test(test_init_cuts_utf8),
        cmocka_unit_test(test_caps_worst_expansion),
        cmocka_unit_test(test_payload_escaping_bound),
        cmocka_unit_test(test_payload_multibyte_at_cut),
        cmocka_unit_test(test_random_alerts),
        cmocka_unit_test(test_capped_no_larger_than_bound),
        cmocka_unit_test(test_format_usd),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
